package device

// Evidence is what a card's vendor library or tool reports of its
// hardware, beyond its UUID and memory (Card.UUID, Card.MemoryMiB): what a
// node puts in its signed capacity ad so that peers can tell two claims of
// one card apart from two cards. Empty fields are not reported by the
// backend. Simulated cards have none.
type Evidence struct {
	Serial          string `json:"serial,omitempty"`
	BoardPartNumber string `json:"board_part_number,omitempty"`
	// PCIDeviceID is the PCI device and vendor ID as NVML reports it
	// (0x233010DE: device 0x2330 of vendor 0x10DE); PCISubsystemID the
	// subsystem ID.
	PCIDeviceID    uint32 `json:"pci_device_id,omitempty"`
	PCISubsystemID uint32 `json:"pci_subsystem_id,omitempty"`
	DriverVersion  string `json:"driver_version,omitempty"`
	// MaxSMClockMHz and MaxMemClockMHz are the maximum graphics (SM) and
	// memory clocks.
	MaxSMClockMHz  uint32 `json:"max_sm_clock_mhz,omitempty"`
	MaxMemClockMHz uint32 `json:"max_mem_clock_mhz,omitempty"`
}

// IsZero reports whether e holds nothing.
func (e Evidence) IsZero() bool { return e == Evidence{} }
