package load

import (
	"errors"
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteRatePlot draws an open-loop sweep as one PNG at path: the share of requests the model served
// (left) and the p99 latency (right) against the arrival rate, with the model capacity marked.
func WriteRatePlot(path string, rows []RateRow, capacity float64) error {
	if len(rows) == 0 {
		return errors.New("plot: no rows")
	}
	share, p99 := make(plotter.XYs, len(rows)), make(plotter.XYs, len(rows))
	for i, r := range rows {
		share[i] = plotter.XY{X: r.Rate, Y: r.ModelShare}
		p99[i] = plotter.XY{X: r.Rate, Y: r.Summary.Latency.P99}
	}
	left := plot.New()
	left.Title.Text = "served by the model"
	left.X.Label.Text = "arrival rate, req/s"
	left.Y.Label.Text = "share of requests (gated, reranked or fused)"
	left.Y.Min, left.Y.Max = 0, 1.05
	right := plot.New()
	right.Title.Text = "p99 latency (from scheduled arrival)"
	right.X.Label.Text = "arrival rate, req/s"
	right.Y.Label.Text = "ms"
	right.Y.Min = 0
	if err := plotutil.AddLinePoints(left, "model share", share); err != nil {
		return err
	}
	if err := plotutil.AddLinePoints(right, "p99", p99); err != nil {
		return err
	}
	if capacity > 0 {
		for _, p := range []*plot.Plot{left, right} {
			ymax := p.Y.Max
			if p == right {
				ymax = 0
				for _, xy := range p99 {
					ymax = max(ymax, xy.Y)
				}
			}
			l, err := plotter.NewLine(plotter.XYs{{X: capacity, Y: 0}, {X: capacity, Y: ymax}})
			if err != nil {
				return err
			}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("capacity %.1f req/s", capacity), l)
		}
	}
	left.Legend.Top = false
	right.Legend.Top, right.Legend.Left = false, false

	tile := vg.Length(12) * vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(2*tile, tile*0.75), vgimg.UseDPI(100))
	t := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter / 2, PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4,
		PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 4}
	plots := [][]*plot.Plot{{left, right}}
	canvases := plot.Align(plots, t, draw.New(img))
	left.Draw(canvases[0][0])
	right.Draw(canvases[0][1])
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
