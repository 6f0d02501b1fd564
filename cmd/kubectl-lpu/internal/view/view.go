package view

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedapi "k8s.io/api/scheduling/v1beta1"

	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/claimstatus"
	"github.com/hyperaccel/lpu-node/pkg/cordon"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// LPUResource is the device plugin's count resource.
const LPUResource corev1.ResourceName = "hyperaccel.ai/lpu"

// Sizes are the arc sizes the summary counts.
var Sizes = []int{1, 2, 4, 8}

// Cluster is what the plugin shows.
type Cluster struct {
	Nodes   []Node  `json:"nodes"`
	Pods    []Pod   `json:"pods"`
	Summary Summary `json:"summary"`
	// Groups are the PodGroups (Workload API) that pods name or that
	// exist, by namespace/name.
	Groups []*Group `json:"podGroups,omitempty"`
	// DRA says whether the DRA objects (ResourceSlices, ResourceClaims)
	// were read; when not, DRA nodes are missing and pods show counts only.
	DRA DRA `json:"dra"`
}

// DRA is whether the cluster's DRA objects could be read, and why not.
type DRA struct {
	// Available is true when ResourceSlices and ResourceClaims
	// (resource.k8s.io/v1) were listed.
	Available bool `json:"available"`
	// Reason says why not: the cluster does not serve the API, or the
	// reader may not list them.
	Reason string `json:"reason,omitempty"`
}

// Group is a PodGroup of the Workload API (scheduling.k8s.io/v1beta1): a
// gang of pods the scheduler places whole, and how many of its pods run.
type Group struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// MinCount is the gang's minCount, 1 for a basic group, 0 when the
	// PodGroup object is not visible (missing, or the API is off).
	MinCount int `json:"minCount"`
	// Pods name the group in spec.schedulingGroup (unfinished ones);
	// Running of them are in phase Running.
	Pods    int `json:"pods"`
	Running int `json:"running"`
	// Whole is true when at least MinCount of the pods run (every pod
	// that names the group when MinCount is unknown).
	Whole bool `json:"whole"`
	// Scheduled is the scheduler's PodGroupInitiallyScheduled condition:
	// "True", or "False" and its reason; empty while the scheduler has not
	// tried the group.
	Scheduled string `json:"scheduled,omitempty"`
}

// Node is one node's LPUs.
type Node struct {
	Name string `json:"name"`
	// Mode is "dra" (lpu-dra's ResourceSlices) or "device-plugin" (the
	// count in the node's allocatable).
	Mode  string `json:"mode"`
	Rings []Ring `json:"rings,omitempty"` // DRA only: positions are known
	Total int    `json:"total"`
	Free  int    `json:"free"`
	// LargestFreeArc is the longest run of free ring neighbours (DRA);
	// for device-plugin nodes, whose positions the API does not show, -1.
	LargestFreeArc int `json:"largestFreeArc"`
	// Labels are the node's hyperaccel.ai/lpu.* feature labels (NFD).
	Labels map[string]string `json:"labels,omitempty"`
	// Arcs is how many more arcs of each size the node can take now
	// (device-plugin nodes: how many more pods of that count).
	Arcs map[int]int `json:"arcs"`
	// Cordoned are the LPUs an operator took out of service (kubectl lpu
	// cordon: the Node annotation lpu.hyperaccel.ai/cordoned), sorted. On
	// a DRA node a cordoned LPU is never free; on a device-plugin node the
	// kubelet already left it out of the allocatable count (Total).
	Cordoned []string `json:"cordoned,omitempty"`
}

// Ring is one ring: the holder of each position in ring order, "" free.
type Ring struct {
	Index   int      `json:"index"`
	LPUs    []string `json:"lpus"`
	Holders []string `json:"holders"`
}

// Pod is a pod holding LPUs.
type Pod struct {
	Namespace  string   `json:"namespace"`
	Name       string   `json:"name"`
	Node       string   `json:"node"`
	LPUs       []string `json:"lpus,omitempty"` // DRA: the allocated LPUs in arc order
	Count      int      `json:"count"`
	Contiguous *bool    `json:"contiguous,omitempty"` // DRA only
	Claim      string   `json:"claim,omitempty"`
	// Prepared is true when lpu-dra reported every arc of the claim in its
	// status.devices (the node prepared it; LPUs and DeviceNodes come from
	// there), false while only allocated (LPUs from the slices). DRA only.
	Prepared *bool `json:"prepared,omitempty"`
	// DeviceNodes are the device node paths the pod's containers got, from
	// the claim's status (DRA).
	DeviceNodes []string `json:"deviceNodes,omitempty"`
	// StatusMismatch is true when the claim's status.devices names
	// another arc or other LPUs than its allocation does on the published
	// slices: the allocation's LPUs are shown (anyone who may write claim
	// status could otherwise make held LPUs look free), the status is not
	// trusted and the claim not counted as prepared. DRA only.
	StatusMismatch bool `json:"statusMismatch,omitempty"`
	// Group is the PodGroup the pod names, nil for none. Pods of a group
	// are listed even while they hold no LPUs (Count 0, Node empty while
	// Pending), so that a group that is not whole shows who is missing.
	Group *Group `json:"podGroup,omitempty"`
}

// Summary is the cluster's total.
type Summary struct {
	Nodes int         `json:"nodes"`
	Total int         `json:"total"`
	Free  int         `json:"free"`
	Arcs  map[int]int `json:"arcs"`
}

// Build assembles the view from the API objects: lpu-dra's ResourceSlices
// and the claims allocated from them (DRA nodes), node allocatable and
// the pods' limits (device-plugin nodes), and the PodGroups the pods name.
func Build(nodes []corev1.Node, slices []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim, pods []corev1.Pod, groups []schedapi.PodGroup) Cluster {
	rings := draRings(slices)
	var out Cluster
	holders, draPods := claimHolders(rings, claims)
	used, dpPods := countUsed(pods)
	out.Pods = append(draPods, dpPods...)
	out.Pods, out.Groups = withGroups(out.Pods, pods, groups)
	out.Summary.Arcs = map[int]int{}
	for _, n := range nodes {
		v, ok := nodeView(n, rings, holders[n.Name], used[n.Name])
		if !ok {
			continue
		}
		out.Nodes = append(out.Nodes, v)
		out.Summary.Nodes++
		out.Summary.Total += v.Total
		out.Summary.Free += v.Free
		for _, k := range Sizes {
			out.Summary.Arcs[k] += v.Arcs[k]
		}
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	sort.Slice(out.Pods, func(i, j int) bool {
		a, b := out.Pods[i], out.Pods[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return out
}

// claimHolders maps each node's allocated LPUs to the pod (or claim)
// holding them, and lists those pods. An arc's LPUs come from the claim's
// status.devices entry when lpu-dra wrote one (the node prepared it),
// else from the published slices.
func claimHolders(rings map[string][][]string, claims []resourceapi.ResourceClaim) (map[string]map[string]string, []Pod) {
	holders := map[string]map[string]string{} // node → LPU → pod
	var pods []Pod
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		holder := c.Namespace + "/" + c.Name
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" {
				holder = c.Namespace + "/" + r.Name
			}
		}
		status := statusData(c)
		p := Pod{Claim: c.Name}
		prepared, arcs := true, 0
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver != inject.Driver {
				continue
			}
			st, reported := status[res.Pool+"/"+res.Device]
			ids, reported, mismatch := arcLPUs(st, reported, rings[res.Pool], res.Device)
			p.StatusMismatch = p.StatusMismatch || mismatch
			if ids == nil {
				continue
			}
			arcs++
			p.Node = res.Pool
			prepared = prepared && reported
			if reported {
				p.DeviceNodes = append(p.DeviceNodes, st.DeviceNodes...)
			}
			if holders[p.Node] == nil {
				holders[p.Node] = map[string]string{}
			}
			for _, id := range ids {
				p.LPUs = append(p.LPUs, id)
				holders[p.Node][id] = holder
			}
		}
		if p.Node == "" {
			continue
		}
		p.Namespace, p.Name, _ = strings.Cut(holder, "/")
		p.Count = len(p.LPUs)
		contig := contiguous(rings[p.Node], p.LPUs) || (arcs == 1 && rings[p.Node] == nil) // one arc is one run
		p.Contiguous, p.Prepared = &contig, &prepared
		pods = append(pods, p)
	}
	return holders, pods
}

// arcLPUs are the LPUs of the allocated arc device on a pool of rings rs:
// from its status.devices entry st (when reported) if that names the same
// arc and, where the slices show the arc, the same LPUs; else from the
// slices, with trusted false, and mismatch true when a status entry said
// otherwise. nil when neither names them.
func arcLPUs(st claimstatus.Data, reported bool, rs [][]string, device string) (ids []string, trusted, mismatch bool) {
	sliced := slicedLPUs(rs, device)
	if !reported {
		return sliced, false, false
	}
	arc, err := arcslice.ParseDeviceName(device)
	if err != nil || st.Ring != arc.Ring || st.Start != arc.Start || st.Size != arc.Size || (sliced != nil && !slices.Equal(st.LPUs, sliced)) {
		return sliced, false, true
	}
	return st.LPUs, true, false
}

// statusData reads lpu-dra's status.devices entries of a claim, by
// pool/device; an entry that does not parse is left out (the slices
// still name the arc's LPUs).
func statusData(c resourceapi.ResourceClaim) map[string]claimstatus.Data {
	out := map[string]claimstatus.Data{}
	for _, d := range c.Status.Devices {
		if d.Driver != inject.Driver || d.Data == nil {
			continue
		}
		if data, err := claimstatus.Parse(d.Data.Raw); err == nil {
			out[d.Pool+"/"+d.Device] = data
		}
	}
	return out
}

// slicedLPUs are the LPUs of arc device name on a pool's rings as the
// slices show them; nil when they do not.
func slicedLPUs(rs [][]string, name string) []string {
	arc, err := arcslice.ParseDeviceName(name)
	if err != nil || arc.Ring >= len(rs) || arc.Start >= len(rs[arc.Ring]) || arc.Size > len(rs[arc.Ring]) {
		return nil
	}
	ring := rs[arc.Ring]
	ids := make([]string, 0, arc.Size)
	for i := 0; i < arc.Size; i++ {
		ids = append(ids, ring[(arc.Start+i)%len(ring)])
	}
	return ids
}

// countUsed sums the LPU counts of the bound, unfinished pods per node.
func countUsed(pods []corev1.Pod) (map[string]int, []Pod) {
	used := map[string]int{}
	var out []Pod
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		n := 0
		for _, c := range p.Spec.Containers {
			if q, ok := c.Resources.Limits[LPUResource]; ok {
				n += int(q.Value())
			}
		}
		if n > 0 {
			used[p.Spec.NodeName] += n
			out = append(out, Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Count: n})
		}
	}
	return used, out
}

// nodeView is one node's LPUs; false for a node with none.
func nodeView(n corev1.Node, rings map[string][][]string, holders map[string]string, used int) (Node, bool) {
	// A malformed value: its well-formed entries, as the daemons read it.
	cordoned, _ := cordon.Parse(n.Annotations[cordon.Annotation])
	v := Node{Name: n.Name, Arcs: map[int]int{}, Cordoned: cordoned}
	for k, val := range n.Labels {
		if strings.HasPrefix(k, "hyperaccel.ai/lpu.") {
			if v.Labels == nil {
				v.Labels = map[string]string{}
			}
			v.Labels[k] = val
		}
	}
	if rs, ok := rings[n.Name]; ok {
		v.Mode = "dra"
		for i, ring := range rs {
			r := Ring{Index: i, LPUs: ring, Holders: make([]string, len(ring))}
			free := make([]bool, len(ring))
			for j, id := range ring {
				r.Holders[j] = holders[id]
				free[j] = r.Holders[j] == "" && !slices.Contains(cordoned, id)
				v.Total++
				if free[j] {
					v.Free++
				}
			}
			v.LargestFreeArc = max(v.LargestFreeArc, largestRun(free))
			for _, k := range Sizes {
				v.Arcs[k] += arcsFit(free, k)
			}
			v.Rings = append(v.Rings, r)
		}
		return v, true
	}
	q, ok := n.Status.Allocatable[LPUResource]
	if !ok || q.Value() <= 0 {
		return v, false
	}
	v.Mode = "device-plugin"
	v.Total = int(q.Value())
	v.Free = max(v.Total-used, 0)
	v.LargestFreeArc = -1
	for _, k := range Sizes {
		v.Arcs[k] = v.Free / k
	}
	return v, true
}

// maxRings bounds the ring index a slice may name (a node has a handful),
// so that a bad slice cannot make draRings allocate without limit.
const maxRings = 1024

// draRings reads each pool's rings from lpu-dra's slices: counter set
// ring<R> has one counter per LPU of ring R, so its length n, and device
// ring<R>-start<S>-size<K> with lpus "a,b,…" puts its i-th LPU at position
// (S+i) mod n. Any published size will do (config dra.arcSizes may leave
// out the single LPUs); arcs without lpus (longer than the API's string
// limit) say nothing.
func draRings(slices []resourceapi.ResourceSlice) map[string][][]string {
	out := map[string][][]string{}
	ringLen := draRingLengths(slices, out)
	for _, s := range slices {
		if s.Spec.Driver != inject.Driver {
			continue
		}
		pool := s.Spec.Pool.Name
		for _, d := range s.Spec.Devices {
			placeArc(out, pool, ringLen[pool], d)
		}
	}
	return out
}

// draRingLengths returns the length of each pool's rings from its counter
// sets, and enters every pool of lpu-dra's slices in out.
func draRingLengths(slices []resourceapi.ResourceSlice, out map[string][][]string) map[string][]int {
	ringLen := map[string][]int{}
	for _, s := range slices {
		if s.Spec.Driver != inject.Driver {
			continue
		}
		pool := s.Spec.Pool.Name
		if _, ok := out[pool]; !ok {
			out[pool] = nil
		}
		for _, cs := range s.Spec.SharedCounters {
			r, err := strconv.Atoi(strings.TrimPrefix(cs.Name, "ring"))
			if err != nil || r < 0 || r >= maxRings {
				continue
			}
			for len(ringLen[pool]) <= r {
				ringLen[pool] = append(ringLen[pool], 0)
			}
			ringLen[pool][r] = len(cs.Counters)
		}
	}
	return ringLen
}

// placeArc puts the LPUs of d, an arc device of pool, at their positions
// on its ring in out; ringLen are the pool's ring lengths.
func placeArc(out map[string][][]string, pool string, ringLen []int, d resourceapi.Device) {
	arc, err := arcslice.ParseDeviceName(d.Name)
	if err != nil || arc.Ring >= len(ringLen) {
		return
	}
	n := ringLen[arc.Ring]
	a, ok := d.Attributes["lpus"]
	if !ok || a.StringValue == nil || n == 0 || arc.Start >= n {
		return
	}
	for len(out[pool]) <= arc.Ring {
		out[pool] = append(out[pool], nil)
	}
	ring := out[pool][arc.Ring]
	if len(ring) != n {
		ring = make([]string, n)
		out[pool][arc.Ring] = ring
	}
	for i, id := range strings.Split(*a.StringValue, ",") {
		ring[(arc.Start+i)%n] = id
	}
}

// contiguous says whether ids are consecutive positions of one ring.
func contiguous(rings [][]string, ids []string) bool {
	for _, ring := range rings {
		pos := map[string]int{}
		for i, id := range ring {
			pos[id] = i
		}
		p0, ok := pos[ids[0]]
		if !ok {
			continue
		}
		for i, id := range ids {
			if p, ok := pos[id]; !ok || p != (p0+i)%len(ring) {
				return false
			}
		}
		return true
	}
	return false
}

// largestRun is the longest run of free positions on a ring, wrapping.
func largestRun(free []bool) int {
	n := len(free)
	best, run := 0, 0
	for i := 0; i < 2*n; i++ {
		if free[i%n] {
			run++
			best = max(best, min(run, n))
		} else {
			run = 0
		}
	}
	return best
}

// arcsFit is how many disjoint free k-arcs the ring still holds: each
// free run of length L (wrapping) takes L/k of them.
func arcsFit(free []bool, k int) int {
	n := len(free)
	if k > n {
		return 0
	}
	start := -1
	for i, f := range free {
		if !f {
			start = i
			break
		}
	}
	if start < 0 {
		return n / k
	}
	total, run := 0, 0
	for i := 1; i <= n; i++ {
		if free[(start+i)%n] {
			run++
		} else {
			total += run / k
			run = 0
		}
	}
	return total + run/k
}

// Text renders the nodes view: per node a line per ring, each position a
// letter naming its holder (legend below), "x" when cordoned and free, or
// "." when free, and a summary line.
func (c Cluster) Text() string { return c.nodesText(false) }

// WideText is Text with, per node, its feature labels and how many more
// arcs of each size it takes, and each ring's every LPU ID.
func (c Cluster) WideText() string { return c.nodesText(true) }

func (c Cluster) nodesText(wide bool) string {
	var b strings.Builder
	letters := map[string]string{}
	var legend []string
	letter := func(holder string) string {
		if l, ok := letters[holder]; ok {
			return l
		}
		i := len(letters)
		l := string(rune('A' + i%26))
		if i >= 26 {
			l = string(rune('a' + (i-26)%26))
		}
		letters[holder] = l
		legend = append(legend, l+" "+Printable(holder))
		return l
	}
	anyCordoned := false
	for _, n := range c.Nodes {
		largest := strconv.Itoa(n.LargestFreeArc)
		if n.LargestFreeArc < 0 {
			largest = "?"
		}
		fmt.Fprintf(&b, "%s  %s  %d/%d free, largest free arc %s", Printable(n.Name), Printable(n.Mode), n.Free, n.Total, largest)
		if len(n.Cordoned) > 0 {
			fmt.Fprintf(&b, ", cordoned %s", strings.Join(n.Cordoned, ","))
		}
		b.WriteString("\n")
		if wide {
			b.WriteString(nodeWide(n))
		}
		for _, r := range n.Rings {
			cells := make([]string, len(r.Holders))
			for i, h := range r.Holders {
				switch {
				case h != "":
					cells[i] = letter(h)
				case slices.Contains(n.Cordoned, r.LPUs[i]):
					cells[i], anyCordoned = "x", true
				default:
					cells[i] = "."
				}
			}
			span := Printable(r.LPUs[0]) + " … " + Printable(r.LPUs[len(r.LPUs)-1])
			if wide {
				span = Printable(strings.Join(r.LPUs, " "))
			}
			fmt.Fprintf(&b, "  ring%d  %s   (%s)\n", r.Index, strings.Join(cells, " "), span)
		}
		if n.Mode == "device-plugin" {
			fmt.Fprintf(&b, "  %s  (count only: the device plugin does not publish positions)\n", strings.Repeat("# ", n.Total-n.Free)+strings.Repeat(". ", n.Free))
		}
	}
	if anyCordoned {
		legend = append(legend, "x cordoned (kubectl lpu uncordon NODE LPU)")
	}
	if len(legend) > 0 {
		b.WriteString("\n")
		for _, l := range legend {
			b.WriteString(l + "\n")
		}
	}
	fmt.Fprintf(&b, "\n%d nodes, %d/%d LPUs free; room for", c.Summary.Nodes, c.Summary.Free, c.Summary.Total)
	for _, k := range Sizes {
		fmt.Fprintf(&b, " %d×%d-arc", c.Summary.Arcs[k], k)
	}
	b.WriteString(" more\n")
	return b.String()
}

// nodeWide is the wide view's lines under a node's header: room for more
// arcs by size, then its feature labels.
func nodeWide(n Node) string {
	var b strings.Builder
	b.WriteString("  room")
	for _, k := range Sizes {
		fmt.Fprintf(&b, " %d×%d-arc", n.Arcs[k], k)
	}
	b.WriteString("\n")
	keys := make([]string, 0, len(n.Labels))
	for k := range n.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  label %s=%s\n", Printable(k), Printable(n.Labels[k]))
	}
	return b.String()
}

// PodsText renders the pods view, then the PodGroups (if any) with
// whether each is whole.
func (c Cluster) PodsText() string { return c.podsText(false) }

// PodsWideText is PodsText with two more columns: the claim and the
// device nodes the pod's containers got (DRA).
func (c Cluster) PodsWideText() string { return c.podsText(true) }

func (c Cluster) podsText(wide bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-40s %-24s %-16s %-5s %-10s %-9s %s", "POD", "GROUP", "NODE", "LPUS", "CONTIGUOUS", "STATE", "IDS")
	if wide {
		b.WriteString("  CLAIM  DEVICE-NODES")
	}
	b.WriteString("\n")
	for _, p := range c.Pods {
		contig, state, node, group := "?", "-", p.Node, "-"
		if p.Contiguous != nil {
			contig = strconv.FormatBool(*p.Contiguous)
			state = "allocated"
			if p.Prepared != nil && *p.Prepared {
				state = "prepared"
			}
			if p.StatusMismatch {
				state = "mismatch" // the claim's status names other LPUs than its allocation
			}
		}
		if node == "" {
			node, state = "-", "pending"
		}
		if p.Count == 0 {
			contig = "-" // a group member holding nothing yet
		}
		if p.Group != nil {
			group = p.Group.Name
		}
		ids := orDash(strings.Join(p.LPUs, ","))
		fmt.Fprintf(&b, "%-40s %-24s %-16s %-5d %-10s %-9s %s", Printable(p.Namespace+"/"+p.Name), Printable(group), Printable(node), p.Count, contig, state, Printable(ids))
		if wide {
			fmt.Fprintf(&b, "  %s  %s", Printable(orDash(p.Claim)), Printable(orDash(strings.Join(p.DeviceNodes, ","))))
		}
		b.WriteString("\n")
	}
	b.WriteString(c.groupsText())
	return b.String()
}

// Printable returns s with every rune that is not printable (terminal
// escape sequences, newlines, other control characters) written as a Go
// escape (\x1b, \n, \u200b): names and IDs come from API objects that
// others write, and must not drive the terminal or forge lines.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRune(r) // '\x1b'
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// orDash is s, or "-" when empty: a table cell is never blank.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// PodsWhere is c with only the pods keep accepts and the PodGroups one of
// them belongs to (a selector narrows the pods view; the counts of each
// group still cover all its pods).
func (c Cluster) PodsWhere(keep func(Pod) bool) Cluster {
	var pods []Pod
	kept := map[*Group]bool{}
	for _, p := range c.Pods {
		if keep(p) {
			pods = append(pods, p)
			kept[p.Group] = true
		}
	}
	var groups []*Group
	for _, g := range c.Groups {
		if kept[g] {
			groups = append(groups, g)
		}
	}
	c.Pods, c.Groups = pods, groups
	return c
}
