package device_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// FuzzNetworkTableAddresses parses tables whose tokens are LPU IDs or PCI
// addresses of four cards (either function, any case). On success every
// LPU named is on exactly one ring, consecutive ring members are linked in
// the input (after resolving), and rings are canonical; a token naming no
// card is always an error naming the table and line.
func FuzzNetworkTableAddresses(f *testing.F) {
	addr := func(i int, fnc string) string { return devicesim.XilinxAddress(i)[:10] + "." + fnc }
	for _, s := range []string{
		addr(0, "1") + " " + addr(2, "0") + "\n" + addr(2, "1") + " " + addr(1, "1") + "\n" + addr(1, "0") + " " + addr(3, "1") + "\n" + addr(3, "0") + " lpu0\n",
		addr(0, "1") + " " + addr(0, "0"), "0000:99:00.1 lpu1", "lpu0 0000:18:00.1\n", "0000:17:00.1\n", "0000:B1:00.1 lpu1",
	} {
		f.Add(s)
	}
	resolve := func(tok string) (int, error) {
		if idx, err := device.ParseID(tok); err == nil && idx < 4 {
			return idx, nil
		}
		for i := 0; i < 4; i++ {
			if strings.EqualFold(tok, addr(i, "1")) || strings.EqualFold(tok, addr(i, "0")) {
				return i, nil
			}
		}
		return 0, fmt.Errorf("%q names no card", tok)
	}
	f.Fuzz(func(t *testing.T, in string) {
		nt, err := device.ParseNetworkTableFunc("T", []byte(in), resolve)
		known := true
		links := map[[2]int]bool{}
		named := map[int]bool{}
		for line := range strings.SplitSeq(in, "\n") {
			line, _, _ = strings.Cut(line, "#")
			fields := strings.Fields(line)
			var ids []int
			for _, tok := range fields {
				idx, rerr := resolve(tok)
				if rerr != nil {
					known = false
				}
				ids = append(ids, idx)
				named[idx] = true
			}
			if len(ids) == 2 {
				links[[2]int{ids[0], ids[1]}] = true
				links[[2]int{ids[1], ids[0]}] = true
			}
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "network table T") {
				t.Fatalf("error %q does not name the table", err)
			}
			return
		}
		if !known {
			t.Fatalf("a token naming no card was accepted: %v", nt.Rings)
		}
		on := map[int]int{}
		for _, ring := range nt.Rings {
			for p, id := range ring {
				idx, _ := device.ParseID(id)
				on[idx]++
				next, _ := device.ParseID(ring[(p+1)%len(ring)])
				if len(ring) > 1 && !links[[2]int{idx, next}] {
					t.Fatalf("ring %v: %d and %d not linked in input", ring, idx, next)
				}
			}
		}
		for idx := range named {
			if on[idx] != 1 {
				t.Fatalf("lpu%d on %d rings: %v", idx, on[idx], nt.Rings)
			}
		}
		if len(on) != len(named) {
			t.Fatalf("rings %v name LPUs the input does not", nt.Rings)
		}
	})
}

// FuzzXilinxAttributes writes arbitrary content into the health attributes
// of one simulated Orion card. Discovery never fails for it; the card is
// healthy exactly when ready is 1, dev_offline and device_bad_state are 0
// (integers, base prefix allowed), the shell is the configured one, the
// render dev attribute parses and the instance is the one its node has; an
// unhealthy card has a reason; nothing names the discovery root.
func FuzzXilinxAttributes(f *testing.F) {
	f.Add("0x1", "0", "0", device.DefaultXilinxShell, "226:128", "5888")
	f.Add("0x0", "1", "1", "other", "226:", "0")
	f.Add("1\n", "0x0", "00", device.DefaultXilinxShell+"\n", "226:128\n", "5888\n")
	f.Add("", "", "", "", "", "")
	root := orion(f, 1)
	user := fn(root, devicesim.XilinxAddress(0))
	mgmt := fn(root, devicesim.XilinxAddress(0)[:10]+".0")
	rom, err := filepath.Glob(user + "/rom.u.*")
	if err != nil || len(rom) != 1 {
		f.Fatal(rom, err)
	}
	s := xilinx(root)
	f.Fuzz(func(t *testing.T, ready, offline, bad, shell, dev, inst string) {
		for p, v := range map[string]string{
			user + "/ready": ready, user + "/dev_offline": offline, user + "/device_bad_state": bad,
			rom[0] + "/VBNV": shell, user + "/drm/renderD128/dev": dev, mgmt + "/instance": inst,
		} {
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		inv, err := s.Discover(context.Background())
		if err != nil {
			t.Fatalf("Discover failed on one card's attributes: %v", err)
		}
		if len(inv.Devices) != 1 {
			t.Fatalf("%d devices", len(inv.Devices))
		}
		d := inv.Devices[0]
		is := func(v string, want int64) bool {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
			return err == nil && n == want && len(v) <= device.MaxAttrBytes
		}
		major, _, devErr := device.ParseDev(strings.TrimSpace(dev))
		want := is(ready, 1) && is(offline, 0) && is(bad, 0) &&
			strings.TrimSpace(shell) == device.DefaultXilinxShell && devErr == nil && len(dev) <= device.MaxAttrBytes &&
			strings.TrimSpace(inst) == "5888" && major == devicesim.RenderMajor
		// Any minor passes: under a simulated root a plain file stands in
		// for the node, so only the parse and the major's driver (drm in
		// the simulated /proc/devices) are checked.
		if d.Health.Healthy != want {
			t.Fatalf("healthy %v, want %v: %q", d.Health.Healthy, want, d.Health.Reason)
		}
		if !d.Health.Healthy && d.Health.Reason == "" {
			t.Fatal("unhealthy without a reason")
		}
		if strings.Contains(d.Health.Reason, root) {
			t.Fatalf("root leaked: %s", d.Health.Reason)
		}
		if h := s.ProbeHealth(d.ID); h != d.Health {
			t.Fatalf("ProbeHealth %+v differs from Discover %+v", h, d.Health)
		}
	})
}
