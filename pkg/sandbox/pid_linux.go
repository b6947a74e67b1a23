package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// sandboxPid maps process hostPid of this machine to its pid in its innermost pid namespace
// (NSpid in /proc/PID/status), with its start time, field 22 of /proc/PID/stat, which is the
// same in every namespace and so lets the sandbox check that the pid is still that process.
func sandboxPid(hostPid int) (int, string, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hostPid))
	if err != nil {
		return 0, "", err
	}
	var ns []string
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			ns = strings.Fields(v)
		}
	}
	if len(ns) < 2 {
		return 0, "", fmt.Errorf("process %d is in no pid namespace of its own (NSpid %v)", hostPid, ns)
	}
	pid, err := strconv.Atoi(ns[len(ns)-1])
	if err != nil {
		return 0, "", fmt.Errorf("process %d: NSpid %v", hostPid, ns)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", hostPid))
	if err != nil {
		return 0, "", err
	}
	start, err := statStart(stat)
	return pid, start, err
}

// statStart is field 22 of a /proc/PID/stat line, the process's start time in clock ticks
// since boot. The name field before it may hold spaces and parentheses.
func statStart(stat []byte) (string, error) {
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(f) < 20 {
		return "", fmt.Errorf("unreadable /proc stat line %q", safeText(stat))
	}
	if _, err := strconv.ParseUint(f[19], 10, 64); err != nil {
		return "", fmt.Errorf("unreadable start time in /proc stat line %q", safeText(stat))
	}
	return f[19], nil
}

// safeText is text from the sandbox or /proc, cut short and with control characters escaped,
// for an error message.
func safeText(b []byte) string {
	q := strconv.QuoteToASCII(string(b[:min(len(b), 512)]))
	return q[1 : len(q)-1]
}
