//go:build linux && cgo

package probe

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

typedef int gm_result;
typedef int gm_device;
typedef void *gm_context;
typedef void *gm_module;
typedef void *gm_function;
typedef unsigned long long gm_ptr;

static void *gm_lib;
static gm_result (*gm_cuInit)(unsigned int);
static gm_result (*gm_cuDeviceGetByPCIBusId)(gm_device *, const char *);
static gm_result (*gm_cuDevicePrimaryCtxRetain)(gm_context *, gm_device);
static gm_result (*gm_cuDevicePrimaryCtxRelease)(gm_device);
static gm_result (*gm_cuCtxSetCurrent)(gm_context);
static gm_result (*gm_cuModuleLoadData)(gm_module *, const void *);
static gm_result (*gm_cuModuleUnload)(gm_module);
static gm_result (*gm_cuModuleGetFunction)(gm_function *, gm_module, const char *);
static gm_result (*gm_cuMemAlloc)(gm_ptr *, size_t);
static gm_result (*gm_cuMemFree)(gm_ptr);
static gm_result (*gm_cuMemcpyDtoH)(void *, gm_ptr, size_t);
static gm_result (*gm_cuLaunchKernel)(gm_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, void *, void **, void **);
static gm_result (*gm_cuCtxSynchronize)(void);
static gm_result (*gm_cuGetErrorString)(gm_result, const char **);

static void *gm_sym(const char *v2, const char *v1) {
	void *p = v2 ? dlsym(gm_lib, v2) : NULL;
	return p ? p : dlsym(gm_lib, v1);
}

// gm_open loads libcuda.so.1 and its entry points: 0 on success, 1 when the
// library is missing, 2 when a symbol is.
static int gm_open(void) {
	if (gm_lib) return 0;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) return 1;
	gm_lib = lib;
	gm_cuInit = gm_sym(NULL, "cuInit");
	gm_cuDeviceGetByPCIBusId = gm_sym(NULL, "cuDeviceGetByPCIBusId");
	gm_cuDevicePrimaryCtxRetain = gm_sym(NULL, "cuDevicePrimaryCtxRetain");
	gm_cuDevicePrimaryCtxRelease = gm_sym("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	gm_cuCtxSetCurrent = gm_sym(NULL, "cuCtxSetCurrent");
	gm_cuModuleLoadData = gm_sym(NULL, "cuModuleLoadData");
	gm_cuModuleUnload = gm_sym(NULL, "cuModuleUnload");
	gm_cuModuleGetFunction = gm_sym(NULL, "cuModuleGetFunction");
	gm_cuMemAlloc = gm_sym("cuMemAlloc_v2", "cuMemAlloc");
	gm_cuMemFree = gm_sym("cuMemFree_v2", "cuMemFree");
	gm_cuMemcpyDtoH = gm_sym("cuMemcpyDtoH_v2", "cuMemcpyDtoH");
	gm_cuLaunchKernel = gm_sym(NULL, "cuLaunchKernel");
	gm_cuCtxSynchronize = gm_sym(NULL, "cuCtxSynchronize");
	gm_cuGetErrorString = gm_sym(NULL, "cuGetErrorString");
	if (!gm_cuInit || !gm_cuDeviceGetByPCIBusId || !gm_cuDevicePrimaryCtxRetain || !gm_cuDevicePrimaryCtxRelease ||
	    !gm_cuCtxSetCurrent || !gm_cuModuleLoadData || !gm_cuModuleUnload || !gm_cuModuleGetFunction ||
	    !gm_cuMemAlloc || !gm_cuMemFree || !gm_cuMemcpyDtoH || !gm_cuLaunchKernel || !gm_cuCtxSynchronize) {
		return 2;
	}
	return 0;
}

static gm_result gm_init(void) { return gm_cuInit(0); }

static const char *gm_error(gm_result r) {
	const char *s = NULL;
	if (gm_cuGetErrorString && gm_cuGetErrorString(r, &s) == 0 && s) return s;
	return "unknown CUDA error";
}

static gm_result gm_device_by_bus(gm_device *d, const char *bus) { return gm_cuDeviceGetByPCIBusId(d, bus); }
static gm_result gm_retain(gm_context *c, gm_device d) { return gm_cuDevicePrimaryCtxRetain(c, d); }
static gm_result gm_release(gm_device d) { return gm_cuDevicePrimaryCtxRelease(d); }
static gm_result gm_set_current(gm_context c) { return gm_cuCtxSetCurrent(c); }
static gm_result gm_load(gm_module *m, const char *ptx) { return gm_cuModuleLoadData(m, ptx); }
static gm_result gm_unload(gm_module m) { return gm_cuModuleUnload(m); }
static gm_result gm_function_of(gm_function *f, gm_module m, const char *name) { return gm_cuModuleGetFunction(f, m, name); }
static gm_result gm_alloc(gm_ptr *p, size_t n) { return gm_cuMemAlloc(p, n); }
static gm_result gm_free(gm_ptr p) { return gm_cuMemFree(p); }
static gm_result gm_copy_back(void *dst, gm_ptr src, size_t n) { return gm_cuMemcpyDtoH(dst, src, n); }
static gm_result gm_sync(void) { return gm_cuCtxSynchronize(); }

static gm_result gm_fill(gm_function f, gm_ptr buf, uint64_t seed, uint64_t n, unsigned grid, unsigned block) {
	void *args[] = {&buf, &seed, &n};
	return gm_cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}

static gm_result gm_round(gm_function f, gm_ptr out, gm_ptr in, uint64_t n, uint64_t mask, uint64_t m, uint64_t c,
                          unsigned grid, unsigned block) {
	void *args[] = {&out, &in, &n, &mask, &m, &c};
	return gm_cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}

static gm_result gm_digest(gm_function f, gm_ptr out, gm_ptr in, uint64_t bw, uint64_t blocks, unsigned grid, unsigned block) {
	void *args[] = {&out, &in, &bw, &blocks};
	return gm_cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/node/probe/kernel"
)

// CUDA runs the probe on NVIDIA cards through the CUDA driver API, loaded
// at run time from libcuda.so.1 (part of the NVIDIA driver, like NVML): no
// CUDA toolkit is needed to build or run gpumesh. The kernels are the PTX
// of package kernel, compiled by the driver for the card. Cards of other
// vendors, and simulated cards, are answered as not probed.
type CUDA struct {
	mu     sync.Mutex
	opened error
	once   bool
}

var _ Backend = (*CUDA)(nil)

// NewCUDA returns the CUDA backend; nothing is loaded until it runs.
func NewCUDA() *CUDA { return &CUDA{} }

// Name implements Backend.
func (c *CUDA) Name() string { return "cuda" }

// open loads the driver once; a missing one is remembered.
func (c *CUDA) open() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.once {
		return c.opened
	}
	c.once = true
	switch C.gm_open() {
	case 1:
		c.opened = fmt.Errorf("%w: the CUDA driver library (libcuda.so.1) is not installed", ErrNoBackend)
	case 2:
		c.opened = fmt.Errorf("%w: libcuda.so.1 lacks a driver API entry point the probe needs (driver too old?)", ErrNoBackend)
	default:
		if r := C.gm_init(); r != 0 {
			c.opened = fmt.Errorf("%w: cuInit: %s", ErrNoBackend, C.GoString(C.gm_error(r)))
		}
	}
	return c.opened
}

// Run implements Backend: every NVIDIA card side by side, each on an OS
// thread of its own (a CUDA context is current per thread).
func (c *CUDA) Run(ctx context.Context, ch Challenge, cards []device.Card) []CardAnswer {
	out := make([]CardAnswer, len(cards))
	err := c.open()
	var wg sync.WaitGroup
	for i, card := range cards {
		out[i] = CardAnswer{Card: card.ID, Model: card.Model, Index: i}
		w, asked := ch.Work[card.Model]
		switch {
		case !asked:
			out[i].Err = "not asked"
			continue
		case card.Vendor != device.VendorNVIDIA || card.Simulated():
			out[i].Unprobed, out[i].Err = true, fmt.Sprintf("no probe for %s cards here", card.Vendor)
			continue
		case err != nil:
			out[i].Unprobed, out[i].Err = true, err.Error()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			digests, err := runCUDA(ctx, card.PCIBusID, Seed(ch.Nonce, i), w, ch.Blocks)
			if err != nil {
				out[i].Err = err.Error()
				return
			}
			out[i].Digests = digests
		}()
	}
	wg.Wait()
	return out
}

func cudaErr(call string, r C.gm_result) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda %s: %s (%d)", call, C.GoString(C.gm_error(r)), int(r))
}

// runCUDA does the work on the card at bus and returns its digests.
func runCUDA(ctx context.Context, bus string, seed uint64, w Work, blocks int) (digests []uint64, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cbus := C.CString(bus)
	defer C.free(unsafe.Pointer(cbus))
	var dev C.gm_device
	if err := cudaErr("cuDeviceGetByPCIBusId "+bus, C.gm_device_by_bus(&dev, cbus)); err != nil {
		return nil, err
	}
	var cctx C.gm_context
	if err := cudaErr("cuDevicePrimaryCtxRetain", C.gm_retain(&cctx, dev)); err != nil {
		return nil, err
	}
	defer C.gm_release(dev)
	if err := cudaErr("cuCtxSetCurrent", C.gm_set_current(cctx)); err != nil {
		return nil, err
	}
	ptx := C.CString(kernel.PTX)
	defer C.free(unsafe.Pointer(ptx))
	var mod C.gm_module
	if err := cudaErr("cuModuleLoadData", C.gm_load(&mod, ptx)); err != nil {
		return nil, err
	}
	defer C.gm_unload(mod)
	fn := func(name string) (C.gm_function, error) {
		cname := C.CString(name)
		defer C.free(unsafe.Pointer(cname))
		var f C.gm_function
		return f, cudaErr("cuModuleGetFunction "+name, C.gm_function_of(&f, mod, cname))
	}
	fill, err := fn("gpumesh_fill")
	if err != nil {
		return nil, err
	}
	round, err := fn("gpumesh_round")
	if err != nil {
		return nil, err
	}
	digest, err := fn("gpumesh_digest")
	if err != nil {
		return nil, err
	}
	bytes := C.size_t(w.Words * 8)
	var a, b, d C.gm_ptr
	if err := cudaErr("cuMemAlloc", C.gm_alloc(&a, bytes)); err != nil {
		return nil, err
	}
	defer C.gm_free(a)
	if err := cudaErr("cuMemAlloc", C.gm_alloc(&b, bytes)); err != nil {
		return nil, err
	}
	defer C.gm_free(b)
	if err := cudaErr("cuMemAlloc", C.gm_alloc(&d, C.size_t(blocks*8))); err != nil {
		return nil, err
	}
	defer C.gm_free(d)

	const threads = 256
	grid := C.uint(min((w.Words+threads-1)/threads, 1<<16))
	n := C.uint64_t(w.Words)
	if err := cudaErr("launch gpumesh_fill", C.gm_fill(fill, a, C.uint64_t(seed), n, grid, threads)); err != nil {
		return nil, err
	}
	bw := w.Words / uint64(blocks)
	in, out := a, b
	for r := range w.Rounds {
		if r%256 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("stopped: %w", ctx.Err())
		}
		m, c := RoundParams(seed, r, bw)
		if err := cudaErr("launch gpumesh_round", C.gm_round(round, out, in, n, C.uint64_t(bw-1), C.uint64_t(m), C.uint64_t(c), grid, threads)); err != nil {
			return nil, err
		}
		in, out = out, in
	}
	dgrid := C.uint((blocks + threads - 1) / threads)
	if err := cudaErr("launch gpumesh_digest", C.gm_digest(digest, d, in, C.uint64_t(bw), C.uint64_t(blocks), dgrid, threads)); err != nil {
		return nil, err
	}
	if err := cudaErr("cuCtxSynchronize", C.gm_sync()); err != nil {
		return nil, err
	}
	digests = make([]uint64, blocks)
	if err := cudaErr("cuMemcpyDtoH", C.gm_copy_back(unsafe.Pointer(&digests[0]), d, C.size_t(blocks*8))); err != nil {
		return nil, err
	}
	return digests, nil
}
