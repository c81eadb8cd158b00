package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"encoding/binary"
	"math/bits"
	"sort"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/ring/ringqp"
)

// Wire format of every object: a 4-byte tag, small uint32 shape fields, (for plaintexts
// and ciphertexts) a length-prefixed metadata blob of at most 4 KiB, then the raw residues
// of every polynomial in a fixed order. The reader builds a template of the expected shape
// from the parameter set first, so the exact byte length is known before anything is read
// and no length field from the input ever sizes an allocation (a hostile peer cannot make
// the process allocate more than its message size).

type polyRef struct {
	p      ring.Poly
	moduli []uint64
}

func refsQP(P ckksParams, v ringqp.Poly, out []polyRef) []polyRef {
	out = append(out, polyRef{v.Q, P.Q()})
	if P.PCount() > 0 {
		out = append(out, polyRef{v.P, P.P()})
	}
	return out
}

func refsGadget(P ckksParams, g *rlwe.GadgetCiphertext, out []polyRef) []polyRef {
	for _, row := range g.Value {
		for _, v := range row {
			for _, p := range v {
				out = refsQP(P, p, out)
			}
		}
	}
	return out
}

// Each residue row is written at w = bitlen(q) bits per coefficient (its prime's width,
// not 64), LSB first, little-endian, the row padded to a whole byte with zero bits: a
// ciphertext at ckks-n14-128's top level takes 300 instead of 448 bits per coefficient.

func rowBytes(n int, q uint64) int { return (n*bits.Len64(q) + 7) / 8 }

func polysSize(refs []polyRef) int {
	n := 0
	for _, r := range refs {
		for l := range r.p.Coeffs {
			n += rowBytes(r.p.N(), r.moduli[l])
		}
	}
	return n
}

func writePolys(out []byte, refs []polyRef) []byte {
	for _, r := range refs {
		for l, row := range r.p.Coeffs {
			w := uint(bits.Len64(r.moduli[l]))
			var acc uint64
			var nb uint
			for _, c := range row {
				acc |= c << nb
				if nb+w >= 64 {
					out = binary.LittleEndian.AppendUint64(out, acc)
					acc = c >> (64 - nb) // Go: a shift by 64 gives 0
					nb = nb + w - 64
				} else {
					nb += w
				}
			}
			for ; nb > 0; nb -= min(nb, 8) {
				out = append(out, byte(acc))
				acc >>= 8
			}
		}
	}
	return out
}

func readPolys(b []byte, refs []polyRef, what string) {
	off := 0
	for _, r := range refs {
		for l, row := range r.p.Coeffs {
			q := r.moduli[l]
			w := uint(bits.Len64(q))
			mask := uint64(1)<<w - 1
			nbytes := rowBytes(len(row), q)
			buf := make([]byte, nbytes+9) // zero tail: 9-byte reads never leave the buffer
			copy(buf, b[off:off+nbytes])
			off += nbytes
			for j := range row {
				p := uint(j) * w
				i, sh := p>>3, p&7
				v := binary.LittleEndian.Uint64(buf[i:]) >> sh
				if sh+w > 64 {
					v |= uint64(buf[i+8]) << (64 - sh)
				}
				if v &= mask; v >= q {
					fail(codeSerial, "%s: coefficient not reduced modulo its prime", what)
				}
				row[j] = v
			}
			if used := uint(len(row)) * w; used%8 != 0 && buf[nbytes-1]>>(used%8) != 0 {
				fail(codeSerial, "%s: non-zero padding bits", what)
			}
		}
	}
}

func header(tag string, fields ...uint32) []byte {
	out := []byte(tag)
	for _, f := range fields {
		out = binary.LittleEndian.AppendUint32(out, f)
	}
	return out
}

func readHeader(b []byte, tag string, nfields int, what string) ([]uint32, []byte) {
	if len(b) < 4+4*nfields || string(b[:4]) != tag {
		fail(codeSerial, "not a serialised %s", what)
	}
	f := make([]uint32, nfields)
	for i := range f {
		f[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return f, b[4+4*nfields:]
}

func marshalElement(tag string, degree int, meta *rlwe.MetaData, polys []ring.Poly, P ckksParams) []byte {
	mb, err := meta.MarshalBinary()
	check(err, codeHE, "metadata")
	refs := make([]polyRef, 0, len(polys))
	for _, p := range polys {
		refs = append(refs, polyRef{p, P.Q()})
	}
	hdr := header(tag, uint32(degree), uint32(polys[0].Level()), uint32(len(mb)))
	out := make([]byte, 0, len(hdr)+len(mb)+polysSize(refs)) // one allocation, no regrowth
	out = append(append(out, hdr...), mb...)
	return writePolys(out, refs)
}

// readElement validates shape and metadata and returns (degree, level, metadata, poly bytes).
func readElement(b []byte, tag string, maxDegree int, P ckksParams, what string) (int, int, *rlwe.MetaData, []byte) {
	f, rest := readHeader(b, tag, 3, what)
	degree, level, mlen := int(f[0]), int(f[1]), int(f[2])
	if degree > maxDegree || level > P.MaxLevel() || mlen > 4096 || mlen > len(rest) {
		fail(codeSerial, "%s: shape does not match the parameter set", what)
	}
	meta := &rlwe.MetaData{}
	safeUnmarshal(func() error { return meta.UnmarshalBinary(rest[:mlen]) }, what+" metadata")
	checkMeta(P, meta, what)
	return degree, level, meta, rest[mlen:]
}

func exactLen(b []byte, refs []polyRef, what string) {
	if want := polysSize(refs); len(b) != want {
		fail(codeSerial, "%s: %d bytes of coefficients, the parameter set implies %d", what, len(b), want)
	}
}

//export he_marshal
func he_marshal(ph C.uint64_t, h C.uint64_t, kind *C.int, out **C.uchar, outlen *C.size_t, errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	P := params(ph).P
	var b []byte
	switch o := getAny(uint64(h)).(type) {
	case *SK:
		bound(uint64(ph), o.ph, "secret key")
		b = writePolys(header("SK01"), refsQP(P, o.v.Value, nil))
		*kind = kindSK
	case *PK:
		bound(uint64(ph), o.ph, "public key")
		if o.qOnly {
			fail(codeArgument, "a Q-only public key is not serialised (send pk0 over Q and the seed of a)")
		}
		b = writePolys(header("PK01"), refsQP(P, o.v.Value[1], refsQP(P, o.v.Value[0], nil)))
		*kind = kindPK
	case *EvalKeys:
		bound(uint64(ph), o.ph, "evaluation keys")
		els := o.v.GetGaloisKeysList()
		sort.Slice(els, func(i, j int) bool { return els[i] < els[j] })
		hasRlk := uint32(0)
		var refs []polyRef
		if o.v.RelinearizationKey != nil {
			hasRlk = 1
			refs = refsGadget(P, &o.v.RelinearizationKey.GadgetCiphertext, refs)
		}
		b = header("EK01", hasRlk, uint32(len(els)))
		for _, g := range els {
			b = binary.LittleEndian.AppendUint64(b, g)
			gk, err := o.v.GetGaloisKey(g)
			check(err, codeHE, "Galois key")
			refs = refsGadget(P, &gk.GadgetCiphertext, refs)
		}
		b = writePolys(b, refs)
		*kind = kindEVK
	case *PT:
		bound(uint64(ph), o.ph, "plaintext")
		b = marshalElement("PT01", 0, o.v.MetaData, []ring.Poly{o.v.Value}, P)
		*kind = kindPT
	case *CT:
		bound(uint64(ph), o.ph, "ciphertext")
		b = marshalElement("CT01", o.v.Degree(), o.v.MetaData, o.v.Value, P)
		*kind = kindCT
	case *LWEBatch:
		bound(uint64(ph), o.ph, "LWE batch")
		b = marshalLWE(o)
		*kind = kindLWE
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
	var obj any
	switch kind {
	case kindSK:
		_, rest := readHeader(b, "SK01", 0, "secret key")
		sk := rlwe.NewSecretKey(P)
		refs := refsQP(P, sk.Value, nil)
		exactLen(rest, refs, "secret key")
		readPolys(rest, refs, "secret key")
		obj = &SK{uint64(ph), sk}
	case kindPK:
		_, rest := readHeader(b, "PK01", 0, "public key")
		pk := rlwe.NewPublicKey(P)
		refs := refsQP(P, pk.Value[1], refsQP(P, pk.Value[0], nil))
		exactLen(rest, refs, "public key")
		readPolys(rest, refs, "public key")
		obj = &PK{ph: uint64(ph), v: pk}
	case kindEVK:
		f, rest := readHeader(b, "EK01", 2, "evaluation keys")
		hasRlk, ngal := f[0], int(f[1])
		if hasRlk > 1 || ngal > 2*P.N() || len(rest) < 8*ngal {
			fail(codeSerial, "evaluation keys: malformed header")
		}
		var refs []polyRef
		var rlk *rlwe.RelinearizationKey
		if hasRlk == 1 {
			rlk = rlwe.NewRelinearizationKey(P, evkParams(ph)...)
			refs = refsGadget(P, &rlk.GadgetCiphertext, refs)
		}
		// Size check before allocating the Galois key templates.
		perKey := polysSize(refsGadget(P, &rlwe.NewGaloisKey(P, evkParams(ph)...).GadgetCiphertext, nil))
		if len(rest)-8*ngal != polysSize(refs)+ngal*perKey {
			fail(codeSerial, "evaluation keys: length does not match %d Galois keys", ngal)
		}
		var gks []*rlwe.GaloisKey
		seen := map[uint64]bool{}
		for i := 0; i < ngal; i++ {
			g := binary.LittleEndian.Uint64(rest[8*i:])
			if g%2 == 0 || g <= 1 || g >= uint64(2*P.N()) || seen[g] {
				fail(codeSerial, "evaluation keys: invalid Galois element %d", g)
			}
			seen[g] = true
			gk := rlwe.NewGaloisKey(P, evkParams(ph)...)
			gk.GaloisElement, gk.NthRoot = g, uint64(2*P.N())
			gks = append(gks, gk)
			refs = refsGadget(P, &gk.GadgetCiphertext, refs)
		}
		rest = rest[8*ngal:]
		exactLen(rest, refs, "evaluation keys")
		readPolys(rest, refs, "evaluation keys")
		obj = &EvalKeys{uint64(ph), rlwe.NewMemEvaluationKeySet(rlk, gks...)}
	case kindPT:
		_, level, meta, rest := readElement(b, "PT01", 0, P, "plaintext")
		pt := rlwe.NewPlaintext(P, level)
		*pt.MetaData = *meta
		refs := []polyRef{{pt.Value, P.Q()}}
		exactLen(rest, refs, "plaintext")
		readPolys(rest, refs, "plaintext")
		obj = &PT{ph: uint64(ph), v: pt}
	case kindCT:
		degree, level, meta, rest := readElement(b, "CT01", 2, P, "ciphertext")
		if degree < 1 {
			fail(codeSerial, "ciphertext of degree 0")
		}
		ct := rlwe.NewCiphertext(P, degree, level)
		*ct.MetaData = *meta
		refs := make([]polyRef, 0, degree+1)
		for _, p := range ct.Value {
			refs = append(refs, polyRef{p, P.Q()})
		}
		exactLen(rest, refs, "ciphertext")
		readPolys(rest, refs, "ciphertext")
		obj = &CT{ph: uint64(ph), v: ct}
	case kindLWE:
		obj = unmarshalLWE(uint64(ph), P, b)
	default:
		fail(codeArgument, "unknown object kind %d", kind)
	}
	*out = C.uint64_t(put(obj))
	return codeOK
}
