package bench

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// The SVG canvas: 640×400 pixels, the plot area inside these margins.
const (
	svgW, svgH                           = 640, 400
	svgLeft, svgRight, svgTop, svgBottom = 70, 170, 40, 50
	plotW, plotH                         = svgW - svgLeft - svgRight, svgH - svgTop - svgBottom
	svgTicks                             = 5
)

// lineColors are the colors of a plot's lines, in order (then again).
var lineColors = [...]string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// ErrEmptyPlot is returned by WriteSVG for a plot without a point.
var ErrEmptyPlot = errors.New("bench: plot has no points")

// WriteSVG draws p as an SVG document: axes with ticks, one polyline with
// markers per line, a legend on the right. A log axis skips points ≤ 0.
func WriteSVG(w io.Writer, p Plot) error {
	sx, sy := newAxis(p.LogX), newAxis(p.LogY)
	for _, l := range p.Lines {
		for _, pt := range l.Points {
			sx.add(pt.X)
			sy.add(pt.Y)
		}
	}
	if !sx.ok() || !sy.ok() {
		return fmt.Errorf("%w: %s", ErrEmptyPlot, p.Title)
	}
	sx.finish()
	sy.finish()
	if !p.LogY && sy.lo > 0 {
		sy.lo = 0 // times and counts read best from zero
	}
	px := func(v float64) float64 { return svgLeft + sx.frac(v)*plotW }
	py := func(v float64) float64 { return svgTop + (1-sy.frac(v))*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", svgLeft+plotW/2, esc(p.Title))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", svgLeft, svgTop, plotW, plotH)
	for _, t := range sx.ticks() {
		x := px(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, svgTop, x, svgTop+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, svgTop+plotH+16, tickLabel(t))
	}
	for _, t := range sy.ticks() {
		y := py(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", svgLeft, y, svgLeft+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", svgLeft-6, y+4, tickLabel(t))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", svgLeft+plotW/2, svgH-10, esc(p.XLabel))
	fmt.Fprintf(&b, `<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">%s</text>`+"\n", svgTop+plotH/2, svgTop+plotH/2, esc(p.YLabel))
	for i, l := range p.Lines {
		color := lineColors[i%len(lineColors)]
		var pts []string
		for _, pt := range l.Points {
			if sx.skip(pt.X) || sy.skip(pt.Y) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(pt.X), py(pt.Y)))
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		}
		for _, s := range pts {
			xy := strings.SplitN(s, ",", 2)
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], color)
		}
		ly := svgTop + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", svgW-svgRight+12, ly, svgW-svgRight+32, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", svgW-svgRight+38, ly+4, esc(l.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// axis maps values to [0, 1], linearly or on a log10 scale.
type axis struct {
	log    bool
	lo, hi float64
	n      int
}

func newAxis(log bool) *axis { return &axis{log: log, lo: math.Inf(1), hi: math.Inf(-1)} }

func (a *axis) skip(v float64) bool {
	return math.IsNaN(v) || math.IsInf(v, 0) || (a.log && v <= 0)
}

func (a *axis) add(v float64) {
	if a.skip(v) {
		return
	}
	a.n++
	a.lo, a.hi = math.Min(a.lo, v), math.Max(a.hi, v)
}

func (a *axis) ok() bool { return a.n > 0 }

// finish widens a degenerate range and, on a log axis, rounds the range
// out to powers of ten.
func (a *axis) finish() {
	if a.log {
		a.lo, a.hi = math.Pow(10, math.Floor(math.Log10(a.lo))), math.Pow(10, math.Ceil(math.Log10(a.hi)))
		if a.lo == a.hi {
			a.hi *= 10
		}
		return
	}
	if a.lo == a.hi {
		a.lo, a.hi = a.lo-1, a.hi+1
		if a.lo >= 0 && a.hi-1 >= 0 {
			a.lo = 0
		}
	}
}

func (a *axis) frac(v float64) float64 {
	if a.log {
		return (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	}
	return (v - a.lo) / (a.hi - a.lo)
}

// ticks are powers of ten on a log axis, else about svgTicks round steps.
func (a *axis) ticks() []float64 {
	var out []float64
	if a.log {
		for v := a.lo; v <= a.hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / svgTicks)
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep rounds a step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func tickLabel(v float64) string {
	if math.Abs(v) < 1e-12 {
		return "0"
	}
	return strings.TrimSuffix(FormatValue(v, ""), ".00")
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
