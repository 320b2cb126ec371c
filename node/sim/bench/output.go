package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Files WriteDir writes besides the plots.
const (
	ResultsJSON = "results.json"
	ResultsCSV  = "results.csv"
)

// WriteDir writes results.json, results.csv and every plot's SVG file into
// dir (created if missing) and returns the paths written. A plot without
// points is skipped.
func (r *Results) WriteDir(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var paths []string
	write := func(name string, fill func(f *os.File) error) error {
		p := filepath.Join(dir, name)
		f, err := os.Create(p)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		err = fill(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(p)
			if errors.Is(err, ErrEmptyPlot) {
				return nil
			}
			return fmt.Errorf("bench: %s: %w", p, err)
		}
		paths = append(paths, p)
		return nil
	}
	if err := write(ResultsJSON, func(f *os.File) error { return r.WriteJSON(f) }); err != nil {
		return paths, err
	}
	if err := write(ResultsCSV, func(f *os.File) error { return r.WriteCSV(f) }); err != nil {
		return paths, err
	}
	for _, p := range r.Plots {
		if filepath.Base(p.File) != p.File || p.File == "" {
			return paths, fmt.Errorf("bench: plot file name %q: want a plain name", p.File)
		}
		if err := write(p.File, func(f *os.File) error { return WriteSVG(f, p) }); err != nil {
			return paths, err
		}
	}
	return paths, nil
}
