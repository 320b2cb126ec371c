package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/internal/text"
	"github.com/gpumesh/gpumesh/node/api/client"
)

func newCpCommand(e env) *cobra.Command {
	var (
		af    apiFlags
		share int
	)
	cmd := &cobra.Command{
		Use:   "cp JOB:PATH DEST",
		Short: "Copy a file or directory out of a job's working directory",
		Long: `Copy what PATH names in the working directory of a job's share (share 0
unless --share says otherwise) to DEST on this machine, through any node.
PATH is relative to the working directory: "/outputs" and "outputs" are
the same, and "/" is the whole directory.

While the share runs, the copy is of its working directory as it is now.
Once it ended, its node keeps what the attempt left there for its
--keep-outputs (24h by default), and ` + "`gpumesh job ID`" + ` says where (OUTPUTS);
the copy is of that.

As cp -r: a directory DEST that exists receives the copy under PATH's last
element (the job ID for the whole directory); else DEST is made as the
copy. A file copied over a file replaces it; a directory is never copied
over something that exists. The copy is written beside DEST and moved
into place only once whole: a copy that fails leaves nothing behind.
Only the job's owner may copy.`,
		Example: `  gpumesh cp j3fk2x9q0m1z8c7vb:/outputs ./out
  gpumesh cp j3fk2x9q0m1z8c7vb:model.safetensors .
  gpumesh cp --share 1 j3fk2x9q0m1z8c7vb:/ ./share1`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			job, src, ok := strings.Cut(args[0], ":")
			if !ok {
				return usagef("%q: want JOB:PATH (a job's ID, a colon, and a path in its working directory)", args[0])
			}
			if err := checkJobShare(job, share); err != nil {
				return err
			}
			for _, el := range strings.Split(src, "/") {
				if el == ".." {
					return usagef("%q: the path leaves the job's working directory", args[0])
				}
			}
			c, err := af.client(e)
			if err != nil {
				return err
			}
			defer c.CloseIdleConnections()
			where, st, err := c.CopyOut(cmd.Context(), job, share, src, args[1])
			if errors.Is(err, client.ErrBadArchive) {
				return fmt.Errorf("the node sent %s of job %s that cannot be written: %w; nothing was written", src, job, err)
			}
			if err != nil {
				var ae *client.APIError
				if errors.As(err, &ae) {
					return apiError(err, cpFlags)
				}
				return fmt.Errorf("%w; nothing was written", err)
			}
			what := text.Count(st.Files, "file") + ", " + text.Bytes(st.Bytes)
			if st.Dir {
				what = text.Plural(st.Dirs+1, "directory", "directories") + ", " + what
				if st.Symlinks > 0 {
					what += ", " + text.Count(st.Symlinks, "link")
				}
			}
			fmt.Fprintf(e.stdout, "%s (%s)\n", where, what)
			return nil
		},
	}
	cmd.Flags().IntVar(&share, "share", 0, "the share whose working directory to copy from")
	af.registerOwner(cmd)
	return cmd
}

// cpFlags names the flag or argument behind each field of a copy.
var cpFlags = map[string]string{"share": "--share", "path": "JOB:PATH"}
