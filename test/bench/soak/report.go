package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
)

// Pass criteria of the soak.
const maxRSSGrowth = 0.05 // after the warm-up

func (s *soak) report(started time.Time, series []point) error {
	if len(series) == 0 {
		return errNoSamples
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := measure.ThisMachine()
	p("# kube-gateway soak\n\n")
	p("Run %s on %s. Code: %s (the kube-gateway binary `make build` made from it). Traffic for %s through hub + gateway to member-a as the hub admin (client-go, kubectl): %.0f GETs/s, %.0f LISTs of 200 ConfigMaps/s, %d watches re-opened as they end (each asks for 60 s), a kubectl exec every %s, a kubectl port-forward session with a connection every %s; an UpstreamCluster edit every %s (%d done) and a credential rotation every %s (%d done). Whole run %s.\n\n",
		started.UTC().Format("2006-01-02 15:04 MST"), m, m.Commit, s.o.Duration, s.o.GetRate, s.o.ListRate, s.o.Watches, s.o.ExecEvery, s.o.PingEvery,
		s.o.EditEvery, s.edits.Load(), s.o.RotateEvery, s.rotations.Load(), time.Since(started).Round(time.Second))

	p("## Requests\n\nA failure is a request that failed after the client's own retries (client-go retries 429 and 503 with Retry-After), a watch that ended before the member's timeout or with an error, an exec with another answer, or a port-forward connection that did not echo.\n\n")
	p("| kind | ok | failed |\n|---|---:|---:|\n")
	failed := int64(0)
	for _, k := range sortedKinds(s.kinds) {
		c := s.kinds[k]
		p("| %s | %d | %d |\n", k, c.ok.Load(), c.failed.Load())
		failed += c.failed.Load()
	}
	p("\n")
	for _, k := range sortedKinds(s.kinds) {
		if ex := s.kinds[k].examples; len(ex) > 0 {
			p("%s:\n\n", k)
			for _, e := range ex {
				p("- %s\n", e)
			}
			p("\n")
		}
	}

	// Growth from the end of the warm-up to the end: RSS against the warm-up's
	// last sample; goroutines and files as the median of the first and last
	// fifth after the warm-up (single samples catch a watch being re-opened).
	var after []point
	for _, pt := range series {
		if pt.T >= s.o.Warmup {
			after = append(after, pt)
		}
	}
	p("## The gateway over time\n\n")
	verdict := "pass"
	if failed > 0 {
		verdict = "fail (failed requests)"
	}
	if len(after) >= 5 {
		first, last := after[0], after[len(after)-1]
		growth := float64(last.RSSKB-first.RSSKB) / float64(first.RSSKB)
		fifth := max(1, len(after)/5)
		med := func(pts []point, f func(point) float64) float64 {
			xs := make([]float64, len(pts))
			for i, pt := range pts {
				xs[i] = f(pt)
			}
			return measure.Median(xs)
		}
		gor := func(pt point) float64 { return float64(pt.Goroutines) }
		fds := func(pt point) float64 { return float64(pt.OpenFiles) }
		p("| after the %s warm-up | start | end | change |\n|---|---:|---:|---:|\n", s.o.Warmup)
		p("| gateway RSS | %s | %s | %+.1f %% (pass: < %.0f %%) |\n", measure.MB(float64(first.RSSKB)), measure.MB(float64(last.RSSKB)), 100*growth, 100*maxRSSGrowth)
		g0, g1 := med(after[:fifth], gor), med(after[len(after)-fifth:], gor)
		f0, f1 := med(after[:fifth], fds), med(after[len(after)-fifth:], fds)
		p("| goroutines (median of the first and last fifth) | %.0f | %.0f | %+.0f |\n", g0, g1, g1-g0)
		p("| open files (median of the first and last fifth) | %.0f | %.0f | %+.0f |\n\n", f0, f1, f1-f0)
		if growth >= maxRSSGrowth {
			verdict = "fail (RSS growth)"
		}
	} else {
		verdict = "too short to judge growth"
	}
	var p99s []float64
	for _, pt := range after {
		if pt.Gets > 0 {
			p99s = append(p99s, float64(pt.GetP99))
		}
	}
	if len(p99s) > 0 {
		lo, hi := measure.MinMax(p99s)
		p("GET p99 per %s window after the warm-up: median %s, lowest %s, highest %s.\n\n", s.o.Sample,
			measure.Dur(time.Duration(measure.Median(p99s))), measure.Dur(time.Duration(lo)), measure.Dur(time.Duration(hi)))
	}
	p("Verdict: **%s**. Series: `%s`, plotted in `%s`.\n", verdict, filepath.Join(s.o.OutDir, "series.csv"), filepath.Join(s.o.OutDir, "series.svg"))

	if err := writeCSV(filepath.Join(s.o.OutDir, "series.csv"), series); err != nil {
		return err
	}
	if err := plotSVG(filepath.Join(s.o.OutDir, "series.svg"), series, s.o); err != nil {
		return err
	}
	out := filepath.Join(s.o.OutDir, "report.md")
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Print(b.String())
	logf("report written to %s", out)
	return nil
}

func writeCSV(path string, series []point) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"seconds", "rss_bytes", "goroutines", "open_files", "get_p99_seconds", "gets"})
	for _, pt := range series {
		_ = w.Write([]string{fmt.Sprintf("%.0f", pt.T.Seconds()), fmt.Sprint(pt.RSSKB * 1024), fmt.Sprint(pt.Goroutines), fmt.Sprint(pt.OpenFiles),
			fmt.Sprintf("%.4f", pt.GetP99.Seconds()), fmt.Sprint(pt.Gets)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plotSVG draws RSS, goroutines, open files and GET p99 over time, one panel
// each, with the end of the warm-up marked in the first.
func plotSVG(path string, series []point, o options) error {
	xy := func(f func(point) float64) plotter.XYs {
		out := make(plotter.XYs, len(series))
		for i, pt := range series {
			out[i] = plotter.XY{X: pt.T.Minutes(), Y: f(pt)}
		}
		return out
	}
	panel := func(title, unit string, lines ...any) (*plot.Plot, error) {
		pl := plot.New()
		pl.Title.Text = title
		pl.X.Label.Text = "minutes"
		pl.Y.Label.Text = unit
		pl.Legend.Top, pl.Legend.Left = true, true
		return pl, plotutil.AddLines(pl, lines...)
	}
	rss, err := panel("kube-gateway RSS", "MiB", "RSS", xy(func(pt point) float64 { return float64(pt.RSSKB) / 1024 }))
	if err != nil {
		return err
	}
	warm := plotter.XYs{{X: o.Warmup.Minutes(), Y: 0}, {X: o.Warmup.Minutes(), Y: float64(series[len(series)-1].RSSKB) / 1024}}
	if err := plotutil.AddLines(rss, "end of warm-up", warm); err != nil {
		return err
	}
	gor, err := panel("goroutines", "count", "goroutines", xy(func(pt point) float64 { return float64(pt.Goroutines) }))
	if err != nil {
		return err
	}
	fds, err := panel("open files", "count", "open files", xy(func(pt point) float64 { return float64(pt.OpenFiles) }))
	if err != nil {
		return err
	}
	lat, err := panel(fmt.Sprintf("GET p99 per %s, hub + gateway", o.Sample), "ms", "p99", xy(func(pt point) float64 { return float64(pt.GetP99) / 1e6 }))
	if err != nil {
		return err
	}
	plots := [][]*plot.Plot{{rss}, {gor}, {fds}, {lat}}
	c := vgsvg.New(vg.Points(720), vg.Points(1100))
	tiles := draw.Tiles{Rows: 4, Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 3 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, draw.New(c))
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
