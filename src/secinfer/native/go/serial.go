package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"github.com/tuneinsight/lattigo/v6/ring"

	"secinfer/native/he"
)

// Exports of the wire format (he/wire.go): every handle object to bytes and back.

//export he_marshal
func he_marshal(ph C.uint64_t, h C.uint64_t, kind *C.int, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	var b []byte
	switch o := anyOwned(ph, h).(type) {
	case *SK:
		b, *kind = he.MarshalSK(P, o.v), he.KindSK
	case *PK:
		if o.qOnly {
			fail(codeArgument, "a Q-only public key is not serialised (send pk0 over Q and the seed of a)")
		}
		b, *kind = he.MarshalPK(P, o.v), he.KindPK
	case *EvalKeys:
		b, *kind = he.MarshalEvalKeys(P, o.v), he.KindEVK
	case *PT:
		b, *kind = he.MarshalElement("PT01", 0, o.v.MetaData, []ring.Poly{o.v.Value}, P), he.KindPT
	case *CT:
		b, *kind = he.MarshalElement("CT01", o.v.Degree(), o.v.MetaData, o.v.Value, P), he.KindCT
	case *LWEBatch:
		b, *kind = he.MarshalLWE(P, o.level, o.cts), he.KindLWE
	default:
		fail(codeArgument, "handle %d (%T) cannot be serialised", h, o)
	}
	outBytes(b, out, outlen)
	return codeOK
}

//export he_unmarshal
func he_unmarshal(ph C.uint64_t, kind C.int, data *C.uchar, n C.size_t, out *C.uint64_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	b := inBytes(data, n)
	p := uint64(ph)
	var obj any
	switch kind {
	case he.KindSK:
		obj = &SK{p, he.UnmarshalSK(P, b)}
	case he.KindPK:
		obj = &PK{ph: p, v: he.UnmarshalPK(P, b)}
	case he.KindEVK:
		obj = &EvalKeys{p, he.UnmarshalEvalKeys(P, evkParams(ph), b)}
	case he.KindPT:
		obj = &PT{ph: p, v: he.UnmarshalPT(P, b)}
	case he.KindCT:
		obj = &CT{ph: p, v: he.UnmarshalCT(P, b)}
	case he.KindLWE:
		level, cts := he.UnmarshalLWE(P, b)
		obj = &LWEBatch{ph: p, level: level, cts: cts}
	default:
		fail(codeArgument, "unknown object kind %d", kind)
	}
	*out = C.uint64_t(put(obj))
	return codeOK
}
