package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeSeries writes the points as dir/name.csv and plots them to
// dir/name.png: memory, goroutines with what the phase counts, and the TCP
// connections from the gateway to the member (member-b for the watches,
// member-a for the clusters).
func writeSeries(dir, name, count string, points []point, toMember func(snapshot) []int) error {
	if err := writeCSV(filepath.Join(dir, name+".csv"), count, points, toMember); err != nil {
		return err
	}
	return plotSeries(filepath.Join(dir, name+".png"), name, count, points, toMember)
}

func writeCSV(path, count string, points []point, toMember func(snapshot) []int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"seconds", "phase", count, "rss_bytes", "heap_inuse_bytes", "stack_inuse_bytes", "goroutines", "open_files", "tcp_gateway_to_member", "tcp_hub_to_gateway", "error"})
	for _, pt := range points {
		_ = w.Write([]string{
			fmt.Sprintf("%.1f", pt.T.Seconds()), pt.Phase, fmt.Sprint(pt.Count),
			fmt.Sprint(pt.RSSKB * 1024), fmt.Sprintf("%.0f", pt.HeapInuse), fmt.Sprintf("%.0f", pt.StackInuse),
			fmt.Sprintf("%.0f", pt.Goroutines), fmt.Sprint(pt.OpenFiles), fmt.Sprint(sum(toMember(pt.snapshot))), fmt.Sprint(pt.HubToGateway), pt.Err,
		})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func plotSeries(path, name, count string, points []point, toMember func(snapshot) []int) error {
	xy := func(f func(point) float64) plotter.XYs {
		out := make(plotter.XYs, len(points))
		for i, pt := range points {
			out[i] = plotter.XY{X: pt.T.Seconds(), Y: f(pt)}
		}
		return out
	}
	panel := func(title, unit string, lines ...any) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "seconds"
		p.Y.Label.Text = unit
		p.Legend.Top = true
		p.Legend.Left = true
		return p, plotutil.AddLines(p, lines...)
	}
	const mib = 1 << 20
	mem, err := panel("kube-gateway memory ("+name+")", "MiB",
		"RSS", xy(func(pt point) float64 { return float64(pt.RSSKB) / 1024 }),
		"Go heap in use", xy(func(pt point) float64 { return pt.HeapInuse / mib }),
		"Go stacks in use", xy(func(pt point) float64 { return pt.StackInuse / mib }))
	if err != nil {
		return err
	}
	gor, err := panel("goroutines and "+count, "count",
		"goroutines", xy(func(pt point) float64 { return pt.Goroutines }),
		count, xy(func(pt point) float64 { return float64(pt.Count) }))
	if err != nil {
		return err
	}
	tcp, err := panel("TCP connections", "connections",
		"gateway → member", xy(func(pt point) float64 { return float64(sum(toMember(pt.snapshot))) }),
		"hub → gateway", xy(func(pt point) float64 { return float64(pt.HubToGateway) }))
	if err != nil {
		return err
	}
	plots := [][]*plot.Plot{{mem}, {gor}, {tcp}}
	img := vgimg.New(vg.Points(720), vg.Points(900))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadLeft: vg.Millimeter, PadRight: 3 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
