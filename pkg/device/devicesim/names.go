package devicesim

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The drivers' sysfs and devfs names the simulated trees hold. They are
// written here from the layouts pkg/device documents, not taken from its
// discovery code, so that the tests discovering a simulated tree check
// the writer and the reader against each other: a name changed on one
// side only fails them.
const (
	// The lpu driver, under /sys/class/lpu/lpuN.
	attrDev        = "dev"
	attrStatus     = "status"
	attrSerial     = "serial"
	attrFirmware   = "firmware_version"
	attrModel      = "model"
	attrNUMA       = "numa_node"
	attrDeviceLink = "device"
	attrRingID     = "ring_id"
	attrRingPos    = "ring_position"
	lpuDriver      = "lpu" // its major's name in /proc/devices

	// XRT (Orion): xocl on the user function, xclmgmt on the management one.
	xoclDriver        = "xocl"
	xclmgmtNode       = "xclmgmt" // /dev/xclmgmt<instance>, and the driver
	xclmgmtDriverName = xclmgmtNode
	renderDriverName  = "drm" // DRM's major's name in /proc/devices
	fileUserPF        = "user_pf"
	fileMgmtPF        = "mgmt_pf"
	fileReady         = "ready"
	fileDevOffline    = "dev_offline"
	fileBadState      = "device_bad_state"
	fileBoardName     = "board_name"
	fileInstance      = "instance"
	fileVBNV          = "VBNV"
	fileSerialNum     = "serial_num"
	fileXMCTemp       = "xmc_fpga_temp"
	fileXMCPower      = "xmc_power"
	fileHwmonTemp     = "temp4_input"
	subROM            = "rom"
	subXMC            = "xmc"
	renderPrefix      = "renderD"
	hwmonDir          = "hwmon"
)

// cardKey is a PCI address without its function digit: both functions of
// an Orion card share it.
func cardKey(addr string) string { return addr[:len(addr)-2] }

// isPCIAddress reports whether s has the form DDDD:BB:DD.F in hex.
func isPCIAddress(s string) bool {
	if len(s) != len("0000:00:00.0") || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	_, err := strconv.ParseUint(s[:4]+s[5:7]+s[8:10]+s[11:], 16, 64)
	return err == nil
}

// printable reports whether a free-text value survives discovery
// unchanged: at most 128 bytes of valid UTF-8, every rune printable.
func printable(s string) bool {
	if len(s) > 128 || !utf8.ValidString(s) {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r == utf8.RuneError || !unicode.IsPrint(r) })
}

// clip shortens a value for an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
