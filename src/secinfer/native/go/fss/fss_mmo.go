package fss

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"secinfer/native/internal/status"
)

// The PRG of the FSS trees (secinfer/crypto/fss/expand.py): fixed-key AES-128 in
// Matyas-Meyer-Oseas mode,
//
//	H(s, j) = AES_K(s xor j) xor (s xor j),    j xored into the low 64-bit word of s,
//
// with K = SHA-256("secinfer/fss/mmo-fixed-key/v1")[:16]. A 128-bit block is two uint64
// words, word 0 first, each little-endian in memory: the layout of the numpy (B, T, 2)
// uint64 arrays, so a buffer of words is hashed in place without conversion.
//
// Two implementations of the batched in-place hash: an 8-block AES-NI pipeline in C
// (fss_aes.c, x86-64 with the AES instructions), used by default where available, and Go's
// crypto/aes one block at a time (everywhere; the DCF kernels of fss_dcf.c call it back
// through fss_go_mmo). Both are checked against `cryptography`'s AES by
// tests/fss/test_fss_native.py through fss_mmo_hash.

const mmoKeyLabel = "secinfer/fss/mmo-fixed-key/v1"

const (
	mmoImplAuto  = 0
	mmoImplGo    = 1
	mmoImplAESNI = 2
)

var (
	mmoOnce    sync.Once
	mmoCipher  cipher.Block
	mmoKey     [16]byte
	mmoInitErr string
)

// mmoInit sets the hash up once; every export calls it first and fails (every time) if
// the setup failed.
func mmoInit() {
	mmoOnce.Do(func() {
		var probe [2]byte
		binary.LittleEndian.PutUint16(probe[:], 1)
		if *(*uint16)(unsafe.Pointer(&probe[0])) != 1 {
			// The word <-> byte view below assumes little-endian memory (as numpy's does
			// on the machines this runs on); refuse rather than compute different keys.
			mmoInitErr = "the FSS kernels need a little-endian machine"
			return
		}
		sum := sha256.Sum256([]byte(mmoKeyLabel))
		copy(mmoKey[:], sum[:16])
		c, err := aes.NewCipher(mmoKey[:])
		if err != nil {
			mmoInitErr = "AES key setup: " + err.Error()
			return
		}
		mmoCipher = c
		aesniSetup(mmoKey[:])
	})
	if mmoInitErr != "" {
		status.Fail(status.Internal, "%s", mmoInitErr)
	}
}

// wordBytes views a word buffer as its bytes (little-endian machine, checked in mmoInit).
func wordBytes(buf []uint64) []byte {
	if len(buf) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 8*len(buf))
}

// mmoGo hashes every block of buf in place with crypto/aes (one block per call).
func mmoGo(buf []uint64) {
	b := wordBytes(buf)
	var out [16]byte
	for off := 0; off+16 <= len(b); off += 16 {
		blk := b[off : off+16 : off+16]
		mmoCipher.Encrypt(out[:], blk)
		for i := 0; i < 16; i++ {
			blk[i] ^= out[i]
		}
	}
}

// mmoHashInPlace replaces every block x of buf (len(buf) even) by AES_K(x) xor x.
func mmoHashInPlace(buf []uint64, impl int) {
	if useAESNI(impl) == 0 {
		mmoGo(buf)
		return
	}
	aesniMMO(buf)
}

// fss_go_mmo is the crypto/aes hash for the C kernels (where AES-NI is missing or the
// caller asked for this implementation): nblocks blocks of buf in place.
//
//export fss_go_mmo
func fss_go_mmo(buf *C.uint64_t, nblocks C.size_t) {
	if nblocks > 0 {
		mmoGo(unsafe.Slice((*uint64)(unsafe.Pointer(buf)), 2*int(nblocks)))
	}
}

// mmoImplName reports the implementation mmoHashInPlace uses by default.
func mmoImplName() string {
	mmoInit()
	if aesniAvailable() {
		return "aesni-x8"
	}
	return "crypto/aes"
}

// ---------------------------------------------------------------- parallel chunks

// parallelChunks calls fn(c) for c in [0, nchunks) on up to `threads` goroutines (0: one
// per usable core). Every chunk writes a disjoint part of the outputs, so the result does
// not depend on the schedule. A panic in a worker is re-raised in the caller's goroutine
// (where the export's recover turns it into a status code) after all workers stopped:
// no goroutine outlives the call or keeps a pointer into the caller's buffers.
func parallelChunks(nchunks, threads int, fn func(c int)) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	if threads > nchunks {
		threads = nchunks
	}
	if threads <= 1 {
		for c := 0; c < nchunks; c++ {
			fn(c)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstPanic atomic.Value
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					firstPanic.CompareAndSwap(nil, panicBox{r})
					next.Store(int64(nchunks)) // stop handing out chunks
				}
			}()
			for {
				c := int(next.Add(1) - 1)
				if c >= nchunks {
					return
				}
				fn(c)
			}
		}()
	}
	wg.Wait()
	if p := firstPanic.Load(); p != nil {
		panic(p.(panicBox).v)
	}
}

type panicBox struct{ v any }

// ---------------------------------------------------------------- export

// fss_mmo_hash: out[b, i] = H(seeds[b], tweaks[i]) (tweakRows == 0) or
// H(seeds[b], tweaks[b, i]) (tweakRows == nseeds); impl 0 = default, 1 = crypto/aes,
// 2 = AES-NI (an error where it is not available). Used by the tests (known answers
// against `cryptography`, and against expand.MMOHash).
//
//export fss_mmo_hash
func fss_mmo_hash(seeds *C.uint64_t, nseeds C.int64_t, tweaks *C.uint64_t, ntweaks C.int64_t,
	tweakRows C.int64_t, out *C.uint64_t, outLen C.int64_t, impl C.int,
	errbuf *C.char, errlen C.int) (rc C.int) {
	defer recoverTo(&rc, errbuf, errlen)
	mmoInit()
	b, t := int(nseeds), int(ntweaks)
	if b < 0 || t < 0 || (tweakRows != 0 && int(tweakRows) != b) {
		status.Fail(status.Argument, "fss_mmo_hash: bad sizes (%d seeds, %d tweaks, %d tweak rows)", b, t, tweakRows)
	}
	checkImpl(int(impl))
	rows := 1
	if tweakRows != 0 {
		rows = b
	}
	if int(outLen) != 2*b*t {
		status.Fail(status.Argument, "fss_mmo_hash: output holds %d words, need %d", outLen, 2*b*t)
	}
	if b == 0 || t == 0 {
		return status.OK
	}
	s := u64s(seeds, 2*b)
	tw := u64s(tweaks, rows*t)
	o := u64s(out, 2*b*t)
	for i := 0; i < b; i++ {
		row := tw
		if tweakRows != 0 {
			row = tw[i*t : (i+1)*t]
		}
		for j := 0; j < t; j++ {
			o[2*(i*t+j)] = s[2*i] ^ row[j]
			o[2*(i*t+j)+1] = s[2*i+1]
		}
	}
	mmoHashInPlace(o, int(impl))
	return status.OK
}

//export fss_info
func fss_info(out *C.char, outlen C.int) (rc C.int) {
	defer recoverTo(&rc, out, outlen)
	writeErr(out, outlen, "secinfer-fss/1 mmo="+mmoImplName())
	return status.OK
}
