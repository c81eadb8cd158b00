package zkbpp

import (
	mrand "math/rand"
	"testing"
)

// BenchmarkProveSum: one repetition, 1,024 messages at N = 2^13 (two primes).
func BenchmarkProveSum(b *testing.B) {
	benchProve(b, &Config{LogN: 13, Primes: testPrimes(b, 13, 2), Reps: 1, MsgBytes: 24, DataBits: 16, NMsgs: 1024, Points: 1, LogScale: 25})
}

// BenchmarkProveWeighted: weighted-sum shape (one signed batch of 869 8-bit SNPs,
// N = 2^13, two primes), 8 repetitions.
func BenchmarkProveWeighted(b *testing.B) {
	benchProve(b, &Config{LogN: 13, Primes: testPrimes(b, 13, 2), Reps: 8, MsgBytes: 869 + 22, DataBits: 8, NMsgs: 1, Points: 869, LogScale: 40})
}

// BenchmarkProveDistance: location-tracking shape (512 one-block messages of a 16-bit
// coordinate, N = 2^14, five primes), 4 repetitions.
func BenchmarkProveDistance(b *testing.B) {
	benchProve(b, &Config{LogN: 14, Primes: testPrimes(b, 14, 5), Reps: 4, MsgBytes: 24, DataBits: 16, NMsgs: 32, Points: 1, LogScale: 40})
}

// BenchmarkProveMeter: smart-metering shape (1,024 one-block 24-byte messages, N = 2^11,
// one 53-bit prime), 2 repetitions.
func BenchmarkProveMeter(b *testing.B) {
	benchProve(b, &Config{LogN: 11, Primes: testPrimes53(b, 11), Reps: 2, MsgBytes: 24, DataBits: 16, NMsgs: 1024, Points: 1, LogScale: 25})
}

// benchProve times Prove on an honest instance of cfg (built outside the timer).
func benchProve(b *testing.B, cfg *Config) {
	st, w, _ := honestInstance(b, cfg, mrand.New(mrand.NewSource(3)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Prove(cfg, st, w, []byte("0123456789abcdef0123"), []byte("c"))
	}
}
