package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Files copies what path names in the working directory of a share of a
// job (GET /v1/jobs/{id}/files) to w as the node sends it: a tar archive
// (api.FileCopier). Only the job's owner may. ctx bounds the copy.
func (c *Client) Files(ctx context.Context, job string, share int, p string, w io.Writer) (int64, error) {
	resp, done, err := c.send(ctx, request{method: http.MethodGet, path: jobPath(job, "/files"), query: filesQuery(share, p), stream: true})
	if err != nil {
		return 0, err
	}
	defer done()
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("files of job %s: broke off after %d bytes: %w", job, n, err)
	}
	return n, nil
}

func filesQuery(share int, p string) url.Values {
	q := url.Values{}
	if share != 0 {
		q.Set("share", strconv.Itoa(share))
	}
	if p != "" {
		q.Set("path", p)
	}
	return q
}

// CopyOut copies what src names in the working directory of a share of a
// job (a running attempt's, or what the newest ended one left, kept by its
// node for its --keep-outputs) to dst on this machine, as cp -r would: a
// directory dst that exists receives it under src's last element (the job
// ID for the whole working directory); else dst is made as the copy, in
// a directory that exists. A file copied over a file replaces it. A
// directory that would land where something exists is refused, and so is
// a file that would land on a directory.
//
// The copy is written into a temporary directory beside its destination
// and moved into place only once whole: a copy that fails (the node's
// refusal, a cut stream, a bad archive: ErrBadArchive) leaves nothing
// behind. It returns where the copy is and what it holds.
func (c *Client) CopyOut(ctx context.Context, job string, share int, src, dst string) (string, TreeStats, error) {
	var st TreeStats
	dst = filepath.Clean(dst)
	parent, into := filepath.Dir(dst), false
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		parent, into = dst, true
	} else if err == nil && !fi.Mode().IsRegular() {
		return "", st, fmt.Errorf("%s is neither a directory nor a file", dst)
	}
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		return "", st, fmt.Errorf("%s: no such directory to copy into", parent)
	}
	tmp, err := os.MkdirTemp(parent, ".gpumesh-cp-*")
	if err != nil {
		return "", st, err
	}
	defer os.RemoveAll(tmp)
	stage := filepath.Join(tmp, "tree")
	if err := os.Mkdir(stage, 0o700); err != nil {
		return "", st, err
	}
	pr, pw := io.Pipe()
	type result struct {
		st  TreeStats
		err error
	}
	res := make(chan result, 1)
	go func() { // ends when the pipe is closed, whatever the copy did
		st, err := ReadTree(pr, stage)
		pr.CloseWithError(errors.New("the archive was read"))
		res <- result{st, err}
	}()
	_, ferr := c.Files(ctx, job, share, src, pw)
	pw.CloseWithError(ferr)
	r := <-res
	st = r.st
	// The first failure is the one to tell: the archive's, unless it only
	// passes on the request's (a refusal, a cut stream).
	if r.err != nil && (ferr == nil || !errors.Is(r.err, ferr)) {
		return "", st, r.err
	}
	if ferr != nil {
		return "", st, ferr
	}
	from, target := stage, dst
	name := st.Name
	if st.Dir {
		name = path.Base(strings.Trim(path.Clean("/"+filepath.ToSlash(src)), "/"))
		if name == "" || name == "." || name == "/" {
			name = job
		}
	} else {
		from = filepath.Join(stage, st.Name)
	}
	if into {
		target = filepath.Join(dst, name)
	}
	if fi, err := os.Lstat(target); err == nil {
		switch {
		case st.Dir:
			return "", st, fmt.Errorf("%s exists: remove it or name another destination", target)
		case fi.IsDir():
			return "", st, fmt.Errorf("%s is a directory: name a file, or a directory to copy into", target)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", st, err
	}
	if err := os.Rename(from, target); err != nil {
		return "", st, err
	}
	return target, st, nil
}
