package metricsserver

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
)

// HostIPsEnv names the variable holding the node's IP addresses, comma
// separated: the chart sets it from the downward API's status.hostIPs.
const HostIPsEnv = "HOST_IPS"

// nodeAddrs are the addresses the kubelet's probes can come from, as this
// network namespace sees the node: loopback (the pod itself, or the host
// under hostNetwork), every gateway in the routing tables (bridge, ptp and
// Cilium-style networks source the host's connections to a pod from the
// pod's gateway) and hostIPs (routed networks such as Calico's or the AWS
// VPC CNI's source them from the node's IP). No pod can open a connection
// from any of them: the answer to its handshake would go to the node.
// Unreadable or malformed tables and entries are skipped.
func nodeAddrs(hostIPs, route4, route6 string) []netip.Addr {
	addrs := []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	for _, s := range strings.Split(hostIPs, ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			addrs = append(addrs, a.Unmap())
		}
	}
	// /proc/net/route: Iface Destination Gateway ..., the gateway as 8
	// hex digits in host (little-endian) order.
	for _, f := range tableRows(route4, 3) {
		if b, err := hex.DecodeString(f[2]); err == nil && len(b) == 4 {
			var a [4]byte
			binary.LittleEndian.PutUint32(a[:], binary.BigEndian.Uint32(b))
			addrs = appendGateway(addrs, netip.AddrFrom4(a))
		}
	}
	// /proc/net/ipv6_route: destination, its length, source, its length,
	// next hop (32 hex digits in network order), ...
	for _, f := range tableRows(route6, 5) {
		if b, err := hex.DecodeString(f[4]); err == nil && len(b) == 16 {
			addrs = appendGateway(addrs, netip.AddrFrom16([16]byte(b)))
		}
	}
	return addrs
}

// appendGateway appends a, unless it is unspecified (an on-link route).
func appendGateway(addrs []netip.Addr, a netip.Addr) []netip.Addr {
	if a.IsUnspecified() {
		return addrs
	}
	return append(addrs, a)
}

// tableRows reads the routing table at path and returns its rows' fields,
// those with at least n.
func tableRows(path string, n int) [][]string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var rows [][]string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= n {
			rows = append(rows, f)
		}
	}
	return rows
}
