// Package device is everything a node knows about its own accelerators:
// discovery through vendor backends (NVIDIA via NVML, vendor tools for AMD,
// Hygon, Moore Threads, Huawei Ascend and Kunlunxin, and a simulated backend),
// a catalog of card models with their published figures, card health, and the
// environment a job needs to see exactly the cards it was given.
//
// Card is the vendor-neutral record every other package uses. Catalog maps a
// raw device name and memory size to a model key such as "h100-sxm-80g"; a
// card the catalog does not know keeps a derived key starting with "x-" and an
// unknown (zero) compute-unit figure.
package device
