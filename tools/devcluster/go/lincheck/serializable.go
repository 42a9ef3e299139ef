package main

// Serializable reads are answered from one member's local state, which may lag: they are not
// linearizable and stay out of porcupine. etcd's robustness suite checks its reads at a past
// revision against a replay of the store at that revision; we check a serializable read
// against the revision its member reported (the response header's): the key must hold, at
// that revision, exactly what the acknowledged writes say it held then.

import "fmt"

type write struct {
	revision int64
	present  bool
	value    string
}

type writes struct {
	acked         []write          // acknowledged writes with their revisions
	possible      map[string]int64 // every value written (or maybe written) -> call time
	unknownDelete bool             // a delete without an answer: absence may be explained by it
}

func collectWrites(ops []recorded) map[string]*writes {
	byKey := map[string]*writes{}
	for _, op := range ops {
		if !op.isWrite() {
			continue
		}
		w := byKey[op.Key]
		if w == nil {
			w = &writes{possible: map[string]int64{}}
			byKey[op.Key] = w
		}
		switch {
		case op.Kind == "delete" && op.unknown():
			w.unknownDelete = true
		case op.Kind == "delete" && op.Deleted > 0:
			w.acked = append(w.acked, write{revision: op.Revision})
		case op.Kind == "delete":
		case op.unknown():
			w.possible[op.Value] = op.Call
		case op.Kind == "put" || op.Succeeded:
			w.possible[op.Value] = op.Call
			w.acked = append(w.acked, write{revision: op.Revision, present: true, value: op.Value})
		}
	}
	return byKey
}

// checkSerializable returns how many serializable reads it checked and why each bad one is bad.
func checkSerializable(ops []recorded) (int, []string) {
	byKey := collectWrites(ops)
	checked := 0
	var bad []string
	for _, op := range ops {
		if !op.Serializable || op.unknown() {
			continue
		}
		checked++
		w := byKey[op.Key]
		if w == nil {
			w = &writes{possible: map[string]int64{}}
		}
		if reason := staleness(op, w); reason != "" {
			bad = append(bad, fmt.Sprintf("client %d get(%s) at revision %d: %s", op.Client, op.Key, op.Revision, reason))
		}
	}
	return checked, bad
}

func staleness(read recorded, w *writes) string {
	at := read.Revision
	if !read.Found {
		var last *write
		for n := range w.acked {
			if a := &w.acked[n]; a.revision <= at && (last == nil || a.revision > last.revision) {
				last = a
			}
		}
		if last != nil && last.present && !w.unknownDelete {
			return fmt.Sprintf("absent, but %q was written at revision %d", last.value, last.revision)
		}
		return ""
	}
	called, written := w.possible[read.Got]
	if !written {
		return fmt.Sprintf("returned %q, which no write wrote", read.Got)
	}
	if called > *read.Return {
		return fmt.Sprintf("returned %q before its write was called", read.Got)
	}
	if read.ModRevision > at {
		return fmt.Sprintf("returned %q modified at revision %d, after the read's", read.Got, read.ModRevision)
	}
	for _, a := range w.acked {
		if a.revision == read.ModRevision && (!a.present || a.value != read.Got) {
			return fmt.Sprintf("returned %q at mod revision %d, where the acknowledged write wrote %s",
				read.Got, a.revision, register{a.present, a.value})
		}
		if a.revision > read.ModRevision && a.revision <= at {
			return fmt.Sprintf("returned %q (mod revision %d), missing the write of %s at revision %d",
				read.Got, read.ModRevision, register{a.present, a.value}, a.revision)
		}
	}
	return ""
}
