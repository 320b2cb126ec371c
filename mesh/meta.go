package mesh

import (
	"errors"
	"fmt"
	"unicode/utf8"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"google.golang.org/protobuf/encoding/protowire"
)

// MaxMetaSize is the largest encoded Meta: memberlist's limit on node
// metadata.
const MaxMetaSize = 512

// Limits on Meta's fields, checked on both sides.
const (
	MaxRegionLen = 64 // bytes
	MaxModels    = 16 // distinct card models
	MaxModelLen  = 48 // bytes
	MaxCards     = 4096
	maxAddrs     = 16
)

// ErrMetaTooLarge reports a Meta whose fields other than Addrs do not fit in
// MaxMetaSize bytes.
var ErrMetaTooLarge = errors.New("node metadata too large")

// ErrBadMeta reports metadata from a peer (or the caller) that breaks the
// encoding or a field limit.
var ErrBadMeta = errors.New("bad node metadata")

// MetaVersion is the wire version of the membership metadata this build
// writes. A peer whose metadata carries a higher one runs a newer gpumesh
// (the node's status says so).
const MetaVersion = 1

// Meta is what a node tells every member about itself through memberlist:
// where to reach it and a short summary of its capacity. It is a hint for
// dialing and a coarse filter; the capacity ads on gossip are the detail.
//
// On the wire it is a protobuf message (written by hand with protowire):
//
//	1 addrs      repeated bytes  (binary multiaddrs)
//	2 region     string
//	3 cards      uint32
//	4 free_cards uint32
//	5 models     repeated string
//	6 leaving    bool
//	7 coordinator bool
//	8 standby     bool
//	9 version     uint32 (MetaVersion; absent from nodes of before it: 0)
//
// Unknown fields are skipped, so later versions may add fields; a change an
// older reader would misread raises MetaVersion (golden files in
// testdata/wire/ guard the encoding).
type Meta struct {
	// Version is the metadata's wire version as its sender wrote it
	// (MetaVersion; 0 for a sender of before versions). The mesh fills it.
	Version uint32
	// Addrs are the node's libp2p addresses without the /p2p part. The
	// mesh fills them from its host; those that do not fit in MaxMetaSize
	// are left out, public ones kept first.
	Addrs []ma.Multiaddr
	// Region is a free-form location label ("cn-east", "home"), at most
	// MaxRegionLen bytes.
	Region string
	// Cards is the number of cards the node offers; FreeCards how many of
	// them are free now (at most Cards).
	Cards     int
	FreeCards int
	// Models are the catalog keys of the node's cards ("h100-sxm-80g"), at
	// most MaxModels of at most MaxModelLen bytes each.
	Models []string
	// Leaving is set by the mesh while the node leaves gracefully (Close),
	// so that members tell a leave from a crash whatever order the news
	// reaches them in. Ignored by UpdateMeta.
	Leaving bool
	// Coordinator says the node coordinates jobs now (its --coordinator
	// mode and how long it has been a member decide; see package node).
	Coordinator bool
	// Standby says the node does not coordinate yet but will (it has not
	// been a member long enough): package node lets it hold job records
	// while the mesh has too few coordinators.
	Standby bool
}

// validate checks the field limits.
func (m Meta) validate() error {
	if len(m.Region) > MaxRegionLen || !utf8.ValidString(m.Region) {
		return fmt.Errorf("%w: region must be UTF-8 of at most %d bytes", ErrBadMeta, MaxRegionLen)
	}
	if m.Cards < 0 || m.Cards > MaxCards {
		return fmt.Errorf("%w: cards %d outside 0..%d", ErrBadMeta, m.Cards, MaxCards)
	}
	if m.FreeCards < 0 || m.FreeCards > m.Cards {
		return fmt.Errorf("%w: free cards %d outside 0..%d (cards)", ErrBadMeta, m.FreeCards, m.Cards)
	}
	if len(m.Models) > MaxModels {
		return fmt.Errorf("%w: %d models, at most %d", ErrBadMeta, len(m.Models), MaxModels)
	}
	for _, model := range m.Models {
		if model == "" || len(model) > MaxModelLen || !utf8.ValidString(model) {
			return fmt.Errorf("%w: model %q must be UTF-8 of 1 to %d bytes", ErrBadMeta, model, MaxModelLen)
		}
	}
	if len(m.Addrs) > maxAddrs {
		return fmt.Errorf("%w: %d addresses, at most %d", ErrBadMeta, len(m.Addrs), maxAddrs)
	}
	return nil
}

// encodeMeta encodes m in at most MaxMetaSize bytes. Addresses are added in
// order of preference (see rankAddrs) while they fit; the rest are dropped.
// It fails with ErrMetaTooLarge if the other fields alone do not fit.
func encodeMeta(m Meta) ([]byte, error) {
	addrs := m.Addrs
	m.Addrs = nil
	if err := m.validate(); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, MaxMetaSize)
	if m.Region != "" {
		buf = protowire.AppendTag(buf, 2, protowire.BytesType)
		buf = protowire.AppendString(buf, m.Region)
	}
	if m.Cards != 0 {
		buf = protowire.AppendTag(buf, 3, protowire.VarintType)
		buf = protowire.AppendVarint(buf, uint64(m.Cards))
	}
	if m.FreeCards != 0 {
		buf = protowire.AppendTag(buf, 4, protowire.VarintType)
		buf = protowire.AppendVarint(buf, uint64(m.FreeCards))
	}
	for _, model := range m.Models {
		buf = protowire.AppendTag(buf, 5, protowire.BytesType)
		buf = protowire.AppendString(buf, model)
	}
	if m.Leaving {
		buf = protowire.AppendTag(buf, 6, protowire.VarintType)
		buf = protowire.AppendVarint(buf, 1)
	}
	if m.Coordinator {
		buf = protowire.AppendTag(buf, 7, protowire.VarintType)
		buf = protowire.AppendVarint(buf, 1)
	}
	if m.Standby {
		buf = protowire.AppendTag(buf, 8, protowire.VarintType)
		buf = protowire.AppendVarint(buf, 1)
	}
	buf = protowire.AppendTag(buf, 9, protowire.VarintType)
	buf = protowire.AppendVarint(buf, MetaVersion)
	if len(buf) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes without addresses, limit %d", ErrMetaTooLarge, len(buf), MaxMetaSize)
	}
	n := 0
	for _, a := range rankAddrs(addrs) {
		if n == maxAddrs {
			break
		}
		b := a.Bytes()
		size := protowire.SizeTag(1) + protowire.SizeBytes(len(b))
		if len(buf)+size > MaxMetaSize {
			continue
		}
		buf = protowire.AppendTag(buf, 1, protowire.BytesType)
		buf = protowire.AppendBytes(buf, b)
		n++
	}
	return buf, nil
}

// decodeMeta decodes and checks metadata from a peer.
func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) > MaxMetaSize {
		return Meta{}, fmt.Errorf("%w: %d bytes, limit %d", ErrBadMeta, len(b), MaxMetaSize)
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Meta{}, fmt.Errorf("%w: %v", ErrBadMeta, protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return Meta{}, fmt.Errorf("%w: address: %v", ErrBadMeta, protowire.ParseError(n))
			}
			a, err := ma.NewMultiaddrBytes(v)
			if err != nil {
				return Meta{}, fmt.Errorf("%w: address: %v", ErrBadMeta, err)
			}
			if len(m.Addrs) == maxAddrs {
				return Meta{}, fmt.Errorf("%w: more than %d addresses", ErrBadMeta, maxAddrs)
			}
			m.Addrs = append(m.Addrs, a)
			b = b[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return Meta{}, fmt.Errorf("%w: region: %v", ErrBadMeta, protowire.ParseError(n))
			}
			m.Region = v
			b = b[n:]
		case (num == 3 || num == 4) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return Meta{}, fmt.Errorf("%w: card count: %v", ErrBadMeta, protowire.ParseError(n))
			}
			if v > MaxCards {
				return Meta{}, fmt.Errorf("%w: card count %d above %d", ErrBadMeta, v, MaxCards)
			}
			if num == 3 {
				m.Cards = int(v)
			} else {
				m.FreeCards = int(v)
			}
			b = b[n:]
		case num == 5 && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return Meta{}, fmt.Errorf("%w: model: %v", ErrBadMeta, protowire.ParseError(n))
			}
			if len(m.Models) == MaxModels {
				return Meta{}, fmt.Errorf("%w: more than %d models", ErrBadMeta, MaxModels)
			}
			m.Models = append(m.Models, v)
			b = b[n:]
		case num >= 6 && num <= 8 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return Meta{}, fmt.Errorf("%w: flag %d: %v", ErrBadMeta, num, protowire.ParseError(n))
			}
			if v > 1 {
				return Meta{}, fmt.Errorf("%w: flag %d is %d, want 0 or 1", ErrBadMeta, num, v)
			}
			switch num {
			case 6:
				m.Leaving = v == 1
			case 7:
				m.Coordinator = v == 1
			default:
				m.Standby = v == 1
			}
			b = b[n:]
		case num == 9 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || v > 1<<31 {
				return Meta{}, fmt.Errorf("%w: version: bad value", ErrBadMeta)
			}
			m.Version = uint32(v)
			b = b[n:]
		case num >= 1 && num <= 9:
			return Meta{}, fmt.Errorf("%w: field %d has wire type %d", ErrBadMeta, num, typ)
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return Meta{}, fmt.Errorf("%w: field %d: %v", ErrBadMeta, num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	if err := m.validate(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

// rankAddrs orders addresses by how useful they are to a peer far away:
// public direct addresses, then private (LAN) ones, then relayed ones, then
// loopback. The order within a class is kept.
func rankAddrs(addrs []ma.Multiaddr) []ma.Multiaddr {
	rank := func(a ma.Multiaddr) int {
		if isRelayed(a) {
			return 2
		}
		switch {
		case manet.IsIPLoopback(a):
			return 3
		case manet.IsPublicAddr(a):
			return 0
		default:
			return 1
		}
	}
	out := make([]ma.Multiaddr, 0, len(addrs))
	for r := 0; r <= 3; r++ {
		for _, a := range addrs {
			if rank(a) == r {
				out = append(out, a)
			}
		}
	}
	return out
}

// isRelayed tells whether a is a circuit relay address.
func isRelayed(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}
