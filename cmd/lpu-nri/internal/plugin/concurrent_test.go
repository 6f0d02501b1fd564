package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

func TestConcurrentCreateContainer(t *testing.T) {
	const n = 200
	f := newFixture(t, 64, false)
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)

	allocs := verifytest.Arcs(64, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, ids := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rsp, err := rt.CreateContainer(ctx, pod(name, nil), ctr(name, seal(t, f.key, ids...)))
			if err != nil {
				errs <- fmt.Errorf("%s %v: %w", name, ids, err)
				return
			}
			var want []string
			var vis []string
			for _, id := range ids {
				idx, _ := device.ParseID(id)
				want = append(want, dev(idx))
				vis = append(vis, fmt.Sprint(idx))
			}
			v := viewOf(rsp.GetAdjust())
			if !slices.Equal(v.Devices, want) || v.Env[0] != "LPU_VISIBLE_DEVICES="+strings.Join(vis, ",") {
				errs <- fmt.Errorf("%s %v: got devices %v env %v", name, ids, v.Devices, v.Env)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := counter(t, f.p.Metrics().Injections); got != n {
		t.Fatalf("injections = %v, want %d", got, n)
	}
}
