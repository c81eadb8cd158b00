package zkbpp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
)

// spill keeps what the prover must hold until the Fiat-Shamir challenge is known (every
// repetition's three packed views and player 2's packed input share: about three times the
// proof) out of memory, so that the prover's memory does not grow with the repetitions.
// The records go to an unlinked temporary file (nothing is left behind whatever happens to
// the process), encrypted with AES-128-CTR under a fresh key that exists only in memory:
// the views together reveal the witness, so they never reach the disk in the clear.
// Without a usable temporary directory the records stay in memory (as before the spill).
type spill struct {
	f   *os.File // nil: in memory
	blk cipher.Block
	mu  sync.Mutex
	end int64
	mem [][]byte // in memory: record i at offset i
}

// record is a spilled byte string: its offset (a multiple of the AES block) and length.
type record struct {
	off int64
	n   int
}

func newSpill() (*spill, error) {
	f, err := os.CreateTemp("", "secinfer-zkbpp-*")
	if err != nil {
		return &spill{}, nil // no temporary directory: keep the views in memory
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("zkbpp: unlinking the temporary file: %w", err)
	}
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		f.Close()
		return nil, err
	}
	blk, err := aes.NewCipher(key)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &spill{f: f, blk: blk}, nil
}

// xor applies the keystream of the record at off (counter blocks off/16, ...) to b.
func (s *spill) xor(off int64, b []byte) {
	iv := make([]byte, aes.BlockSize)
	binary.BigEndian.PutUint64(iv[8:], uint64(off)/aes.BlockSize)
	cipher.NewCTR(s.blk, iv).XORKeyStream(b, b)
}

// put encrypts b in place (the caller gives it up) and writes it.
func (s *spill) put(b []byte) (record, error) {
	if s.f == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.mem = append(s.mem, b)
		return record{int64(len(s.mem) - 1), len(b)}, nil
	}
	s.mu.Lock()
	off := s.end
	s.end += int64(len(b)+aes.BlockSize-1) / aes.BlockSize * aes.BlockSize
	s.mu.Unlock()
	s.xor(off, b)
	if _, err := s.f.WriteAt(b, off); err != nil {
		return record{}, fmt.Errorf("zkbpp: writing the views: %w", err)
	}
	return record{off, len(b)}, nil
}

// get reads a record back into dst[:r.n] (dst needs the capacity) and decrypts it.
func (s *spill) get(r record, dst []byte) ([]byte, error) {
	if s.f == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.mem[r.off], nil
	}
	b := dst[:r.n]
	if _, err := s.f.ReadAt(b, r.off); err != nil {
		return nil, fmt.Errorf("zkbpp: reading the views back: %w", err)
	}
	s.xor(r.off, b)
	return b, nil
}

func (s *spill) close() {
	if s.f != nil {
		s.f.Close()
	}
}
