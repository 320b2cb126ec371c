// Command imagejob is the entrypoint of the test images: a static program
// that reports what a job sees inside its container, one "key value" line
// each, then does what its arguments ask.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"
)

func main() {
	wd, _ := os.Getwd()
	fmt.Printf("args %s\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("uid %d\ngid %d\ngroups %v\ncwd %s\n", os.Getuid(), os.Getgid(), groups(), wd)
	for _, k := range []string{"FROM_IMAGE", "FROM_JOB", "CUDA_VISIBLE_DEVICES", "HOME", "PATH", "GPUMESH_WORK_DIR", "GPUMESH_CHECKPOINT_DIR", "TMPDIR"} {
		fmt.Printf("env %s=%s\n", k, os.Getenv(k))
	}
	host, _ := os.Hostname()
	fmt.Printf("hostname %s\n", host)
	ents, _ := os.ReadDir("/dev")
	var devs []string
	for _, e := range ents {
		devs = append(devs, e.Name())
	}
	sort.Strings(devs)
	fmt.Printf("dev %s\n", strings.Join(devs, " "))
	fmt.Printf("pid %d\n", os.Getpid())
	try := func(what, path string) {
		err := os.WriteFile(path, []byte(what), 0o644)
		fmt.Printf("write %s %v\n", what, err == nil)
	}
	try("work", os.Getenv("GPUMESH_WORK_DIR")+"/out.txt")
	try("checkpoint", os.Getenv("GPUMESH_CHECKPOINT_DIR")+"/ckpt.txt")
	try("layer", "/app/written-in-layer")
	try("tmp", "/tmp/x")
	_, err := os.ReadFile("/etc/shadow-of-the-node")
	fmt.Printf("node-file %v\n", err == nil)
	if len(os.Args) > 1 && os.Args[1] == "sleep" {
		time.Sleep(time.Hour)
	}
	if len(os.Args) > 2 && os.Args[1] == "dial" {
		// A gang's share: its address, then a line to ADDR:PORT and back.
		fmt.Printf("private %s %s\n", os.Getenv("GPUMESH_PRIVATE_ADDR"), os.Getenv("NCCL_SOCKET_IFNAME"))
		c, err := net.Dial("tcp", os.Args[2])
		if err != nil {
			fmt.Printf("dial %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintln(c, "hello from the image")
		line, err := bufio.NewReader(c).ReadString('\n')
		fmt.Printf("dialed %q %v\n", line, err)
	}
	if len(os.Args) > 2 && os.Args[1] == "exit" {
		var code int
		fmt.Sscan(os.Args[2], &code)
		os.Exit(code)
	}
}

func groups() []int {
	g, _ := os.Getgroups()
	sort.Ints(g)
	return g
}
