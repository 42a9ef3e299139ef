package main

// A register per key: the etcd KV API as the traffic uses it (put, get, delete, and a
// compare-and-swap transaction), without the store-wide revision.
//
// Why not etcd's own model (go.etcd.io/etcd/tests/v3/robustness/model, v3.7.3)? It resolves
// and builds from the module proxy, but its state is the whole store: one revision counter that
// starts at 1 on an empty store, and every response's revision and ModRevision must match it
// exactly. Its suite therefore refuses a history whose store was not empty at the start
// (validateEmptyDatabaseAtStart) and needs every write of the store in the history. raftset's
// sidecars write their membership lock into the same store (on every join, leave and clean
// round), so no history recorded around an operator action holds every write; etcd's model
// would reject a clean run. Unique values make a value compare as strong as a revision
// compare (no ABA), and per-key state lets porcupine check each key on its own.

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// register is one key's state; comparable, so porcupine's default equality applies.
type register struct {
	Present bool
	Value   string
}

func (r register) String() string {
	if !r.Present {
		return "(absent)"
	}
	return fmt.Sprintf("%q", r.Value)
}

type input struct {
	Kind   string // put, get, delete, cas
	Key    string
	Value  string  // put, cas: the new value
	Expect *string // cas: the value compared (nil: the key must be absent)
}

type output struct {
	Unknown   bool // timed out or failed: it may or may not have taken effect
	Found     bool
	Value     string
	Deleted   int64
	Succeeded bool
}

func step(state, in, out interface{}) (bool, interface{}) {
	r := state.(register)
	i := in.(input)
	o := out.(output)
	switch i.Kind {
	case "put":
		return true, register{true, i.Value}
	case "delete":
		if o.Unknown {
			return true, register{}
		}
		return o.Deleted == boolInt(r.Present), register{}
	case "cas":
		matches := i.Expect == nil && !r.Present || i.Expect != nil && r.Present && r.Value == *i.Expect
		next := r
		if matches {
			next = register{true, i.Value}
		}
		// An unknown compare-and-swap is linearized where its compare decides it; placed after
		// every other operation it took no effect at all.
		return o.Unknown || o.Succeeded == matches, next
	case "get":
		return o.Found == r.Present && (!o.Found || o.Value == r.Value), r
	}
	panic("unknown operation kind " + i.Kind)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func describe(in, out interface{}) string {
	i := in.(input)
	o := out.(output)
	var call string
	switch i.Kind {
	case "put":
		call = fmt.Sprintf("put(%q)", i.Value)
	case "cas":
		expect := "(absent)"
		if i.Expect != nil {
			expect = fmt.Sprintf("%q", *i.Expect)
		}
		call = fmt.Sprintf("cas(%s -> %q)", expect, i.Value)
	default:
		call = i.Kind + "()"
	}
	switch {
	case o.Unknown:
		return call + " -> unknown"
	case i.Kind == "get" && !o.Found:
		return call + " -> (absent)"
	case i.Kind == "get":
		return fmt.Sprintf("%s -> %q", call, o.Value)
	case i.Kind == "delete":
		return fmt.Sprintf("%s -> deleted %d", call, o.Deleted)
	case i.Kind == "cas":
		return fmt.Sprintf("%s -> succeeded=%t", call, o.Succeeded)
	}
	return call + " -> ok"
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		k := op.Input.(input).Key
		if _, seen := byKey[k]; !seen {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	parts := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, byKey[k])
	}
	return parts
}

var registerModel = porcupine.Model{
	Partition:         partitionByKey,
	Init:              func() interface{} { return register{} },
	Step:              step,
	DescribeOperation: describe,
	DescribeState:     func(s interface{}) string { return s.(register).String() },
	// The endpoint that answered (or did not).
	DescribeOperationMetadata: func(info interface{}) string { return fmt.Sprint(info) },
}
