// Command lincheck reads a client history (JSON, from tests/harness/history.py) and says whether
// it is linearizable: exit 0 and "linearizable: ..." if so; exit 1 and "NOT linearizable: ..."
// with porcupine's HTML visualization written to -html if not; exit 2 for a malformed history,
// exit 3 if porcupine ran out of time (no verdict).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// recorded is one operation as the Python traffic records it.
type recorded struct {
	Client       int     `json:"client"`
	Kind         string  `json:"op"`
	Key          string  `json:"key"`
	Value        string  `json:"value"`
	Expect       *string `json:"expect"`
	Serializable bool    `json:"serializable"`
	Call         int64   `json:"call"`
	Return       *int64  `json:"return"` // null: no answer (timed out or failed, outcome unknown)
	Found        bool    `json:"found"`
	Got          string  `json:"got"`
	ModRevision  int64   `json:"mod_revision"`
	Deleted      int64   `json:"deleted"`
	Succeeded    bool    `json:"succeeded"`
	Revision     int64   `json:"revision"`
	Endpoint     string  `json:"endpoint"` // for people reading the visualization
	Error        string  `json:"error"`    // what the client was told, when the outcome is unknown
}

type history struct {
	Operations []recorded `json:"operations"`
}

func (r recorded) unknown() bool { return r.Return == nil }

func (r recorded) isWrite() bool { return r.Kind != "get" }

func load(reader io.Reader) ([]recorded, error) {
	var h history
	decoder := json.NewDecoder(reader)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&h); err != nil {
		return nil, err
	}
	for n, op := range h.Operations {
		switch op.Kind {
		case "put", "get", "delete", "cas":
		default:
			return nil, fmt.Errorf("operation %d: unknown op %q", n, op.Kind)
		}
		if op.Return != nil && *op.Return < op.Call {
			return nil, fmt.Errorf("operation %d returned (%d) before it was called (%d)", n, *op.Return, op.Call)
		}
	}
	return h.Operations, nil
}

// linearizable turns the recorded operations into porcupine's: a read without an answer is
// dropped (it changed nothing), serializable reads are checked apart (checkSerializable), and an
// operation without an answer never returns (math.MaxInt64), as in etcd's robustness suite,
// unless some answered operation saw its value: then it took effect before that one returned
// (observedBy). After one, its client continues under a new id: a client's operations must not
// overlap.
func linearizable(ops []recorded) []porcupine.Operation {
	var out []porcupine.Operation
	ids := map[int]int{}
	next := 0
	seen := observedBy(ops)
	for _, op := range ops {
		if op.Serializable || (op.unknown() && !op.isWrite()) {
			continue
		}
		id, ok := ids[op.Client]
		if !ok {
			id = next
			next++
			ids[op.Client] = id
		}
		ret := int64(math.MaxInt64)
		if !op.unknown() {
			ret = *op.Return
		} else if t, ok := seen[written{op.Key, op.Value}]; ok && op.Kind != "delete" && t >= op.Call {
			// (seen before it was called: no bound, and porcupine finds that read impossible)
			ret = t
		}
		out = append(out, porcupine.Operation{
			ClientId: id,
			Input:    input{Kind: op.Kind, Key: op.Key, Value: op.Value, Expect: op.Expect},
			Call:     op.Call,
			Output:   output{Unknown: op.unknown(), Found: op.Found, Value: op.Got, Deleted: op.Deleted, Succeeded: op.Succeeded},
			Return:   ret,
			Metadata: op.Endpoint,
		})
		if op.unknown() {
			ids[op.Client] = next
			next++
		}
	}
	return out
}

type written struct{ key, value string }

// observedBy gives, for each value read (by any get, serializable too: a member serves only what
// was committed) or compared successfully, the earliest return time of an answered operation that
// saw it. Values are unique, so a write whose outcome is unknown but whose value was seen took
// effect before then: bounding its return time keeps porcupine's search from trying it at every
// later point, which made histories with many unknown outcomes run out of time.
func observedBy(ops []recorded) map[written]int64 {
	seen := map[written]int64{}
	note := func(key, value string, at int64) {
		if t, ok := seen[written{key, value}]; !ok || at < t {
			seen[written{key, value}] = at
		}
	}
	for _, op := range ops {
		switch {
		case op.unknown():
		case op.Kind == "get" && op.Found:
			note(op.Key, op.Got, *op.Return)
		case op.Kind == "cas" && op.Succeeded && op.Expect != nil:
			note(op.Key, *op.Expect, *op.Return)
		}
	}
	return seen
}

type verdict struct {
	ok      bool
	timeout bool
	summary string
}

func check(ops []recorded, timeout time.Duration, htmlPath string) (verdict, error) {
	history := linearizable(ops)
	parts := partitionByKey(history)
	unpartitioned := registerModel
	unpartitioned.Partition = nil
	var illegal []string
	for _, part := range parts {
		switch porcupine.CheckOperationsTimeout(unpartitioned, part, timeout) {
		case porcupine.Illegal:
			illegal = append(illegal, part[0].Input.(input).Key)
		case porcupine.Unknown:
			return verdict{timeout: true, summary: fmt.Sprintf("no verdict: porcupine ran out of time (%s) on key %s",
				timeout, part[0].Input.(input).Key)}, nil
		}
	}
	serializable, stale := checkSerializable(ops)
	unknown := 0
	for _, op := range ops {
		if op.unknown() {
			unknown++
		}
	}
	counts := fmt.Sprintf("%d operations (%d with unknown outcome) on %d keys, %d serializable reads",
		len(ops), unknown, len(parts), serializable)
	if len(illegal) == 0 && len(stale) == 0 {
		return verdict{ok: true, summary: "linearizable: " + counts}, nil
	}
	var reasons []string
	if len(illegal) > 0 {
		sort.Strings(illegal)
		reasons = append(reasons, fmt.Sprintf("no linearization of key(s) %s", strings.Join(illegal, ", ")))
	}
	if len(stale) > 0 {
		reasons = append(reasons, fmt.Sprintf("%d serializable read(s) inconsistent with the acknowledged writes, first: %s",
			len(stale), stale[0]))
	}
	summary := "NOT linearizable: " + strings.Join(reasons, "; ") + " (" + counts + ")"
	if htmlPath != "" && len(illegal) > 0 {
		_, info := porcupine.CheckOperationsVerbose(registerModel, history, timeout)
		if err := porcupine.VisualizePath(registerModel, info, htmlPath); err != nil {
			return verdict{}, fmt.Errorf("writing the visualization: %w", err)
		}
		summary += "; visualization: " + htmlPath
	}
	return verdict{summary: summary}, nil
}

func main() {
	htmlPath := flag.String("html", "", "where to write porcupine's visualization on a violation")
	timeout := flag.Duration("timeout", 60*time.Second, "porcupine's time budget per key")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: lincheck [-html out.html] [-timeout 60s] [history.json | -]")
		flag.PrintDefaults()
	}
	flag.Parse()
	reader := io.Reader(os.Stdin)
	if name := flag.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Println("malformed history:", err)
			os.Exit(2)
		}
		defer f.Close()
		reader = f
	}
	ops, err := load(reader)
	if err != nil {
		fmt.Println("malformed history:", err)
		os.Exit(2)
	}
	v, err := check(ops, *timeout, *htmlPath)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println(v.summary)
	switch {
	case v.ok:
		os.Exit(0)
	case v.timeout:
		os.Exit(3)
	}
	os.Exit(1)
}
