package churn

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Mix is a distribution of request sizes.
type Mix struct {
	Name    string
	Sizes   []int
	Weights []int
}

// Mean is the expected request size.
func (m Mix) Mean() float64 {
	sum, w := 0.0, 0
	for i, s := range m.Sizes {
		sum += float64(s * m.Weights[i])
		w += m.Weights[i]
	}
	return sum / float64(w)
}

// String is the mix in flag syntax, "1:40,2:30,4:20,8:10".
func (m Mix) String() string {
	parts := make([]string, len(m.Sizes))
	for i, s := range m.Sizes {
		parts[i] = fmt.Sprintf("%d:%d", s, m.Weights[i])
	}
	return strings.Join(parts, ",")
}

// MixDefault is the simulator's default mix: sizes 1/2/4/8 at 40/30/20/10.
var MixDefault = Mix{Name: "default", Sizes: []int{1, 2, 4, 8}, Weights: []int{40, 30, 20, 10}}

// Job is one request: drawn once from the seed, replayed for every policy.
type Job struct {
	Size   int
	Arrive float64 // arrival time; mean job lifetime is 1
	End    float64 // Arrive + exponential lifetime
}

// Generate draws n jobs: Poisson arrivals at the rate that offers load ×
// capacity LPUs of work per unit time, sizes from mix, exponential
// lifetimes of mean 1.
func Generate(seed uint64, mix Mix, n int, load float64, capacity int) []Job {
	rng := rand.New(rand.NewPCG(seed, 0x6a6f6273)) // "jobs"
	rate := load * float64(capacity) / mix.Mean()
	total := 0
	for _, w := range mix.Weights {
		total += w
	}
	jobs := make([]Job, n)
	t := 0.0
	for i := range jobs {
		t += rng.ExpFloat64() / rate
		pick := rng.IntN(total)
		size := mix.Sizes[len(mix.Sizes)-1]
		for k, w := range mix.Weights {
			if pick < w {
				size = mix.Sizes[k]
				break
			}
			pick -= w
		}
		jobs[i] = Job{Size: size, Arrive: t, End: t + rng.ExpFloat64()}
	}
	return jobs
}
