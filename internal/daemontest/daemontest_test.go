package daemontest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

const page = `# HELP x_total X.
x_total{reason="a",node="n"} 3
x_total{reason="b",node="n"} 4
x_total_bucket{le="1"} 9
y 1.5
`

func TestValueAndScrape(t *testing.T) {
	tests := map[string]struct {
		name   string
		labels []string
		want   float64
		ok     bool
	}{
		"no labels":         {name: "y", want: 1.5, ok: true},
		"one label":         {name: "x_total", labels: []string{`reason="b"`}, want: 4, ok: true},
		"two labels":        {name: "x_total", labels: []string{`node="n"`, `reason="a"`}, want: 3, ok: true},
		"not a prefix":      {name: "x", ok: false},
		"label not present": {name: "x_total", labels: []string{`reason="c"`}, ok: false},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) }))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v, ok := Value(page, tc.name, tc.labels...)
			if v != tc.want || ok != tc.ok {
				t.Fatalf("Value = %v, %v; want %v, %v", v, ok, tc.want, tc.ok)
			}
			if !tc.ok {
				if Sample(page, tc.name, tc.labels...) != -1 {
					t.Fatal("Sample of an absent sample is not -1")
				}
				return
			}
			sample := tc.name
			if len(tc.labels) > 0 {
				sample += "{" + tc.labels[0]
				for _, l := range tc.labels[1:] {
					sample += "," + l
				}
				sample += "}"
			}
			if got := Scrape(t, addr, sample); got != tc.want {
				t.Fatalf("Scrape(%s) = %v, want %v", sample, got, tc.want)
			}
		})
	}
	if got := Scrape(t, FreeAddr(t), "y"); got != -1 {
		t.Fatalf("Scrape of a closed port = %v, want -1", got)
	}
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}
