// Package cardedit says what a job's container needs to use its cards:
// the cards' device nodes, the driver's user-space files bound read-only,
// environment variables and, from CDI specs, OCI hooks. The executor
// turns these edits into the container's OCI runtime spec.
//
// A vendor whose cards the supplier describes in CDI specs (the Container
// Device Interface: JSON or YAML files in /etc/cdi and /var/run/cdi, as
// `nvidia-ctk cdi generate` writes them) gets its cards through CDI: the
// CDI library reads the specs, resolves each card (by UUID, then by index)
// to a device of the vendor's domain ("nvidia.com/gpu=GPU-…" or
// "nvidia.com/gpu=0") and applies the spec's and the devices' edits. Any
// other vendor, or one whose specs do not name every card of the job or
// would show a card the job was not given, gets the built-in edits:
//
//   - NVIDIA: /dev/nvidia<index> of each card, nvidiactl, nvidia-uvm,
//     nvidia-uvm-tools and nvidia-modeset; the driver's libraries of the
//     image's NVIDIA_DRIVER_CAPABILITIES (default compute and utility:
//     libcuda.so*, libnvidia-ml.so*, libnvidia-ptxjitcompiler.so* and the
//     rest of nvidia-container-toolkit's lists, only those of the loaded
//     driver's version) bound under /usr/local/nvidia/lib64, its tools
//     (nvidia-smi, nvidia-debugdump, nvidia-persistenced, and MPS's with
//     compute) under /usr/local/nvidia/bin;
//   - AMD: /dev/kfd and each card's DRM render node; Hygon: the same plus
//     /dev/mkfd, and /opt/hyhal;
//   - Huawei Ascend: /dev/davinci<index>, davinci_manager, devmm_svm,
//     hisi_hdc; /usr/local/Ascend/driver/lib64, its version.info,
//     /usr/local/dcmi, npu-smi and /etc/ascend_install.info at their paths;
//   - Moore Threads: /dev/mtgpu.<index> and the card's render node;
//     libmusa.so*, libmtml.so* and mthreads-gmi;
//   - Kunlunxin: /dev/xpu<index> and xpuctrl; libxpuml.so* and xpu-smi.
//
// Libraries and tools that gpumesh binds into a directory of its own are
// made findable through the environment: the directory goes first in
// LD_LIBRARY_PATH and PATH unless they already name it (NVIDIA's CUDA
// images already do: they point at /usr/local/nvidia since nvidia-docker
// 1.0). Binding every name of a library (libcuda.so, libcuda.so.1 and
// libcuda.so.550.54.14 are each the same file) needs no ldconfig, no
// hook and no write into the image, and works in images without a
// glibc ldconfig (Alpine, distroless).
//
// Only the job's own cards' device nodes are ever given: the vendor's
// shared control nodes besides them, never another card's. Simulated
// cards get nothing.
//
//	ed, err := cardedit.New(cardedit.Config{})
//	edits, err := ed.For(jobCards, allCards, imageEnv)
//	// edits.Devices, edits.Mounts, edits.Env, edits.Hooks, edits.Groups
//	for _, p := range ed.Paths(allCards) { fmt.Println(p.Vendor, p.Via, p.Detail) }
package cardedit
