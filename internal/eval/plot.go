package eval

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot files WritePlots writes, each only when the report has the arms it draws.
const (
	PlotNShot       = "nshot.png"
	PlotReliability = "reliability.png"
	PlotLatency     = "latency_cdf.png"
)

// WritePlots draws the report's figures as PNG files in dir and returns the paths written:
// PlotNShot (Hits@1 and Hits@10 against N for the sweep and the paper protocol, one panel per subset),
// PlotReliability (reliability diagrams of the routing and top-1 calibration, with each ECE in the legend)
// and PlotLatency (the empirical latency CDF of every arm).
func WritePlots(dir string, r Report) ([]string, error) {
	var written []string
	var errs []error
	for _, f := range []struct {
		name string
		draw func(Report) ([][]*plot.Plot, error)
	}{{PlotNShot, nshotPlots}, {PlotReliability, reliabilityPlots}, {PlotLatency, latencyPlots}} {
		plots, err := f.draw(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("plot %s: %w", f.name, err))
			continue
		}
		if plots == nil {
			continue
		}
		path := filepath.Join(dir, f.name)
		if err := savePNG(path, plots); err != nil {
			errs = append(errs, fmt.Errorf("plot %s: %w", f.name, err))
			continue
		}
		written = append(written, path)
	}
	return written, errors.Join(errs...)
}

// savePNG lays plots out in a grid (rows of equal length) of 12 x 9 cm tiles and writes a PNG.
func savePNG(path string, plots [][]*plot.Plot) error {
	rows, cols := len(plots), len(plots[0])
	tile := vg.Length(12) * vg.Centimeter
	img := vgimg.NewWith(vgimg.UseWH(tile*vg.Length(cols), tile*0.75*vg.Length(rows)), vgimg.UseDPI(110))
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter / 2, PadY: vg.Centimeter / 2,
		PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 4}
	canvases := plot.Align(plots, t, dc)
	for i := range plots {
		for j, p := range plots[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
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

// nshotPlots draws Hits@1/Hits@10 against N, one panel per subset, for the N-shot sweep and the paper
// protocol; nil when the report has neither.
func nshotPlots(r Report) ([][]*plot.Plot, error) {
	sweep, paper := r.ByProtocol(ProtocolTopN), r.ByProtocol(ProtocolPaper)
	if len(sweep) == 0 && len(paper) == 0 {
		return nil, nil
	}
	var shots []float64
	for _, a := range append(slices.Clone(sweep), paper...) {
		shots = append(shots, float64(a.Shots))
	}
	slices.Sort(shots)
	shots = slices.Compact(shots)
	var row []*plot.Plot
	for _, sub := range []string{SubsetSeen, SubsetNew} {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s-document queries", sub)
		p.X.Label.Text = "N candidates posted to /v1/rerank"
		p.Y.Label.Text = "Hits@k"
		p.Y.Min, p.Y.Max = 0, 1
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = constantTicks(shots)
		p.Legend.Top = true
		var series []any
		for _, g := range []struct {
			label string
			arms  []Arm
		}{{"BM25 top N", sweep}, {"paper", paper}} {
			for _, k := range []int{1, 10} {
				var xys plotter.XYs
				for _, a := range g.arms {
					s := a.Summaries[sub]
					if s.N == 0 {
						continue
					}
					y := s.Hits1
					if k == 10 {
						y = s.Hits10
					}
					xys = append(xys, plotter.XY{X: float64(a.Shots), Y: y})
				}
				if len(xys) > 0 {
					series = append(series, fmt.Sprintf("%s H@%d", g.label, k), xys)
				}
			}
		}
		if len(series) > 0 {
			if err := plotutil.AddLinePoints(p, series...); err != nil {
				return nil, err
			}
		}
		row = append(row, p)
	}
	return [][]*plot.Plot{row}, nil
}

// reliabilityPlots draws the reliability diagrams of the routing ECE and the top-1 ECE for every arm with
// a router probability (all queries of the arm); nil when no arm has one.
func reliabilityPlots(r Report) ([][]*plot.Plot, error) {
	var row []*plot.Plot
	drawn := false
	for _, panel := range []struct {
		title string
		bins  func(Summary) ([]Bin, *float64)
		xl    string
	}{
		{"routing: p_copy >= 0.5 vs gold in context", func(s Summary) ([]Bin, *float64) { return s.RouteBins, s.RouteECE }, "confidence max(p_copy, 1-p_copy)"},
		{"top-1: taken route's probability vs top-1 hit", func(s Summary) ([]Bin, *float64) { return s.TopBins, s.TopECE }, "confidence p(route of top-1)"},
	} {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = panel.xl
		p.Y.Label.Text = "accuracy"
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
		p.Legend.Top, p.Legend.Left = true, true
		diag := plotter.NewFunction(func(x float64) float64 { return x })
		diag.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(diag)
		var series []any
		for _, a := range r.Arms {
			bins, ece := panel.bins(a.Summaries[SubsetAll])
			if ece == nil {
				continue
			}
			var xys plotter.XYs
			for _, b := range bins {
				if b.N > 0 {
					xys = append(xys, plotter.XY{X: b.Conf, Y: b.Acc})
				}
			}
			series = append(series, fmt.Sprintf("%s (ECE %.3f)", a.Name, *ece), xys)
		}
		if len(series) > 0 {
			drawn = true
			if err := plotutil.AddLinePoints(p, series...); err != nil {
				return nil, err
			}
		}
		row = append(row, p)
	}
	if !drawn {
		return nil, nil
	}
	return [][]*plot.Plot{row}, nil
}

// latencyPlots draws the empirical CDF of client-measured latency for the A/B arms and the largest N of
// the sweep.
func latencyPlots(r Report) ([][]*plot.Plot, error) {
	arms := append(r.ByProtocol(ProtocolBM25All), r.ByProtocol(ProtocolSearch)...)
	if sweep := r.ByProtocol(ProtocolTopN); len(sweep) > 0 {
		arms = append(arms, slices.MaxFunc(sweep, func(a, b Arm) int { return a.Shots - b.Shots }))
	}
	var series []any
	for _, a := range arms {
		var ms []float64
		for _, o := range a.Outcomes {
			ms = append(ms, max(msf(o.Latency), 0.01))
		}
		if len(ms) == 0 {
			continue
		}
		slices.Sort(ms)
		xys := make(plotter.XYs, len(ms))
		for i, v := range ms {
			xys[i] = plotter.XY{X: v, Y: float64(i+1) / float64(len(ms))}
		}
		series = append(series, a.Name, xys)
	}
	if len(series) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "latency CDF (client-measured)"
	p.X.Label.Text = "ms (log)"
	p.Y.Label.Text = "share of requests at or below"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = true, true
	if err := plotutil.AddLines(p, series...); err != nil {
		return nil, err
	}
	return [][]*plot.Plot{{p}}, nil
}

// constantTicks labels exactly the given values.
func constantTicks(vs []float64) plot.ConstantTicks {
	ticks := make(plot.ConstantTicks, len(vs))
	for i, v := range vs {
		ticks[i] = plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)}
	}
	return ticks
}
