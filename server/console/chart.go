package console

import (
	"fmt"
	"html"
	"html/template"
	"slices"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
)

// series is a chart's data: per bucket, a count per kind.
type series struct {
	Kinds   []opjournal.EventKind
	Buckets []bucket
	Total   int
}

type bucket struct {
	Start  time.Time
	Counts []int // by Kinds
	Total  int
}

// seriesOf lays the activity rows of kinds over every bucket from since
// to now, empty buckets included.
func seriesOf(rows []journal.ActivityRow, since, now time.Time, width time.Duration, kinds []opjournal.EventKind) series {
	s := series{Kinds: kinds}
	index := map[int64]int{}
	for t := since; !t.After(now); t = t.Add(width) {
		index[t.Unix()] = len(s.Buckets)
		s.Buckets = append(s.Buckets, bucket{Start: t, Counts: make([]int, len(kinds))})
	}
	for _, r := range rows {
		k := slices.Index(kinds, r.Kind)
		i, ok := index[r.Start.Unix()]
		if k < 0 || !ok {
			continue
		}
		s.Buckets[i].Counts[k] += r.Count
		s.Buckets[i].Total += r.Count
		s.Total += r.Count
	}
	return s
}

// kindColours are the bars' fills, chosen to be told apart by people
// with the common colour-vision deficiencies (Okabe-Ito); the legend and
// the table below each chart carry the same figures in text.
var kindColours = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"}

// barChart renders a series as a stacked bar chart in SVG, server-side:
// no script, and only presentation attributes (the CSP forbids inline
// styles). Its title and description make it an accessible image; the
// page also shows the figures as a table.
func barChart(title string, s series, width time.Duration) template.HTML {
	const w, h, left, right, bottom, top = 720.0, 200.0, 40.0, 50.0, 28.0, 10.0
	peak := 0
	for _, b := range s.Buckets {
		peak = max(peak, b.Total)
	}
	scale := niceMax(peak)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-labelledby="%[3]s-t %[3]s-d" xmlns="http://www.w3.org/2000/svg">`, w, h, chartID(title))
	fmt.Fprintf(&b, `<title id="%s-t">%s</title>`, chartID(title), html.EscapeString(title))
	fmt.Fprintf(&b, `<desc id="%s-d">%s: %d in all over %d buckets of %s; the busiest bucket has %d.</desc>`,
		chartID(title), html.EscapeString(title), s.Total, len(s.Buckets), width, peak)
	plotH := h - bottom - top
	// Axis and grid: 0, half, full scale.
	for _, frac := range []float64{0, 0.5, 1} {
		y := top + plotH*(1-frac)
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#bbb" stroke-width="1"/>`, left, w-right, y, y)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" font-size="11" text-anchor="end" fill="#333">%g</text>`, left-4, y+4, float64(scale)*frac)
	}
	n := len(s.Buckets)
	if n > 0 {
		slot := (w - left - right) / float64(n)
		for i, bk := range s.Buckets {
			x := left + float64(i)*slot + slot*0.1
			y := top + plotH
			for k, cnt := range bk.Counts {
				if cnt == 0 {
					continue
				}
				bh := plotH * float64(cnt) / float64(scale)
				y -= bh
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %d</title></rect>`,
					x, y, slot*0.8, bh, kindColours[k%len(kindColours)], bk.Start.UTC().Format("Jan 2 15:04"), s.Kinds[k], cnt)
			}
			if every := max(1, n/6); i%every == 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" font-size="11" text-anchor="middle" fill="#333">%s</text>`, x+slot*0.4, h-8, bk.Start.UTC().Format("Jan 2 15:04"))
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it is escaped above
}

// Colour returns the fill of the k-th kind, for the legend.
func (s series) Colour(k int) string { return kindColours[k%len(kindColours)] }

func chartID(title string) string {
	return "c" + strings.ToLower(strings.NewReplacer(" ", "-", "'", "").Replace(title))
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
func niceMax(v int) int {
	if v <= 1 {
		return 1
	}
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
