// Command imagejob is the entrypoint of the test images: a static program
// that reports what a job sees inside its container, one "key value" line
// each, then does what its arguments ask.
package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	wd, _ := os.Getwd()
	fmt.Printf("args %s\n", strings.Join(os.Args[1:], " "))
	fmt.Printf("uid %d\ngid %d\ngroups %v\ncwd %s\n", os.Getuid(), os.Getgid(), groups(), wd)
	for _, k := range []string{"FROM_IMAGE", "FROM_JOB", "CUDA_VISIBLE_DEVICES", "HOME", "PATH", "LD_LIBRARY_PATH", "FROM_CDI", "GPUMESH_WORK_DIR", "GPUMESH_CHECKPOINT_DIR", "TMPDIR"} {
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
	if len(os.Args) > 1 && os.Args[1] == "cards" {
		cards(os.Args[2:])
	}
	if len(os.Args) > 1 && os.Args[1] == "tty" {
		terminal()
	}
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

// cards reports what a job sees of its cards: each directory's entries
// ("ls:DIR a b"), each regular file's content ("cat:FILE …") and whether
// it can be written ("rw:FILE false"), each device node under /dev and
// what opening it for reading and writing says ("open:/dev/x ok", or the
// error: "no such device or address" from a node no driver serves, once
// the permissions and the device cgroup let it through).
func cards(dirs []string) {
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		fmt.Printf("ls:%s %s%s\n", d, strings.Join(names, " "), errSuffix(err))
		for _, n := range names {
			p := d + "/" + n
			if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			b, _ := os.ReadFile(p)
			if len(b) > 40 {
				b = b[:40]
			}
			fmt.Printf("cat:%s %s\n", p, strings.TrimSpace(string(b)))
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			fmt.Printf("rw:%s %v\n", p, err == nil)
		}
	}
	_ = filepath.WalkDir("/dev", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() && (p == "/dev/pts" || p == "/dev/shm" || p == "/dev/mqueue") {
			return filepath.SkipDir
		}
		// Stat, not the entry's type: a node bound over a file of the
		// container's /dev is listed as that file.
		if fi, err := os.Stat(p); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
			return nil
		}
		switch p {
		case "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx":
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		res := "ok"
		if err == nil {
			f.Close()
		} else if pe, ok := err.(*fs.PathError); ok {
			res = pe.Err.Error()
		}
		fmt.Printf("open:%s %s\n", p, res)
		return nil
	})
}

// terminal reports whether stdin is a terminal and its size ("size 24
// 80"), a new size on each SIGWINCH ("winch 40 120"), then echoes each
// line it reads ("got LINE") until "exit" or the end of its input.
func terminal() {
	ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ)
	if err != nil {
		fmt.Printf("tty false (%v)\n", err)
		os.Exit(3)
	}
	fmt.Printf("tty true\nsize %d %d\n", ws.Row, ws.Col)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, unix.SIGWINCH)
	go func() {
		for range winch {
			if ws, err := unix.IoctlGetWinsize(0, unix.TIOCGWINSZ); err == nil {
				fmt.Printf("winch %d %d\n", ws.Row, ws.Col)
			}
		}
	}()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "exit" {
			break
		}
		fmt.Printf("got %s\n", sc.Text())
	}
	os.Exit(0)
}

func errSuffix(err error) string {
	if err != nil {
		return " (" + err.Error() + ")"
	}
	return ""
}

func groups() []int {
	g, _ := os.Getgroups()
	sort.Ints(g)
	return g
}
