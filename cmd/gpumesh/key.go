package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/ownerkey"
)

// envKey names the owner key file when --key is not given.
const envKey = "GPUMESH_KEY"

// keyFlag is the --key flag of the commands that act as an owner.
type keyFlag struct{ file string }

func (f *keyFlag) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.file, "key", "", "the owner key `FILE` (default $"+envKey+", else $XDG_CONFIG_HOME/gpumesh/owner.key or ~/.config/gpumesh/owner.key)")
}

// path is the key file to use and where the choice came from; explicit says
// the user named it (a flag or the environment).
func (f *keyFlag) path(e env) (path, from string, explicit bool, err error) {
	switch {
	case f.file != "":
		return f.file, "--key", true, nil
	case e.getenv(envKey) != "":
		return e.getenv(envKey), envKey, true, nil
	case e.getenv("XDG_CONFIG_HOME") != "":
		return filepath.Join(e.getenv("XDG_CONFIG_HOME"), "gpumesh", ownerkey.FileName), "the default key", false, nil
	case e.getenv("HOME") != "":
		return filepath.Join(e.getenv("HOME"), ".config", "gpumesh", ownerkey.FileName), "the default key", false, nil
	}
	return "", "", false, usagef("no home directory to keep the owner key in: give --key FILE or $%s", envKey)
}

// load reads the owner key. A missing default key is (nil, path, nil): the
// caller decides whether it needs one; so is a default key with no home
// directory to look in when optional.
func (f *keyFlag) load(e env, optional bool) (*owner.Key, string, error) {
	path, from, explicit, err := f.path(e)
	if err != nil {
		if optional {
			return nil, "", nil
		}
		return nil, "", err
	}
	k, err := ownerkey.Load(path)
	switch {
	case err == nil:
		return &k, path, nil
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		return nil, path, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, path, usagef("%s: no owner key at %s (make one with `gpumesh key create --key %s`)", from, path, path)
	}
	return nil, path, fmt.Errorf("%s: %w", from, err)
}

func newKeyCommand(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Make or show your owner key: the identity your jobs belong to",
		Long: `Your owner key is who you are to the mesh: every job you submit is signed
with it, and only requests signed with it may read the job's logs, results,
bill and checkpoint, or cancel or scale it. Keep it like an SSH key; without
it your jobs cannot be reached.

The key lives in $XDG_CONFIG_HOME/gpumesh/owner.key (~/.config/gpumesh/owner.key),
mode 0600; --key or $GPUMESH_KEY name another file, for this and every other
command.`,
	}
	commandGroup(cmd)
	var cf keyFlag
	create := &cobra.Command{
		Use:   "create",
		Short: "Make a new owner key and print its owner ID",
		Long: `Make a new ed25519 owner key, write it (mode 0600, directory 0700) and print
its owner ID. It never overwrites a key: the jobs of the old one could never
be reached again.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, _, _, err := cf.path(e)
			if err != nil {
				return err
			}
			k, err := ownerkey.Create(path)
			if errors.Is(err, ownerkey.ErrExists) {
				return usagef("%s: an owner key exists there already and stays as it was (`gpumesh key show` prints its ID)", path)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "gpumesh: owner key written to %s; keep it safe: your jobs belong to it\n", path)
			_, err = fmt.Fprintln(e.stdout, k.ID())
			return err
		},
	}
	cf.register(create)
	var sf keyFlag
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the owner ID of your key (what suppliers put in --allow-owner)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, path, err := sf.load(e, false)
			if err != nil {
				return err
			}
			if k == nil {
				return fmt.Errorf("no owner key at %s: make one with `gpumesh key create`", path)
			}
			_, err = fmt.Fprintln(e.stdout, k.ID())
			return err
		},
	}
	sf.register(show)
	cmd.AddCommand(create, show)
	return cmd
}
