package popk

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
	"github.com/tuneinsight/lattigo/v6/schemes/ckks"
	"github.com/tuneinsight/lattigo/v6/utils/sampling"

	"secinfer/native/he"
	"secinfer/native/internal/status"
)

// A public key whose uniform part is chosen by the *other* party, and the linear map of
// the proof that the key is well formed (crisp, secinfer.crypto.zk.keyproof):
//
//	a    = expansion of a verifier-chosen seed: uniform in R_Q (all Q primes)
//	pk0  = e - a s   (s ternary, e Gaussian: the parameter set's Xs and Xe)
//	F(s, e) = e - a s,   statement: F(s, e) = pk0 with short (s, e)
//
// Only the Q part is defined (the P part is zero and the key is marked qOnly): such a key
// encrypts through he_encrypt_rand only, never through Lattigo's encryptor, whose
// special-prime rounding would also use the unproven P part.

const pkASeedTag = "secinfer/crisp-pk-a/v1"

// ExpandA returns the uniform a (NTT domain over all Q primes: a uniform NTT vector is a
// uniform polynomial) from a 16..32-byte seed.
func ExpandA(P ckks.Parameters, seed []byte) ring.Poly {
	if len(seed) < 16 || len(seed) > 32 {
		status.Fail(status.Argument, "the seed of a must have 16..32 bytes, not %d", len(seed))
	}
	key := sha256.Sum256(append([]byte(pkASeedTag), seed...))
	prng, err := sampling.NewKeyedPRNG(key[:])
	status.Check(err, status.HE, "prng")
	r := P.RingQ()
	a := r.NewPoly()
	ring.NewUniformSampler(prng, r).Read(a)
	return a
}

// QOnlyKey builds the public key (pk0, a) from NTT-domain standard-form polynomials.
func QOnlyKey(P ckks.Parameters, pk0, a ring.Poly) *rlwe.PublicKey {
	r := P.RingQ()
	pk := rlwe.NewPublicKey(P)
	r.MForm(pk0, pk.Value[0].Q)
	r.MForm(a, pk.Value[1].Q)
	return pk
}

// SeededKeyPair: the client's key pair for the verifier's a: s ternary and e Gaussian
// sampled from a PRNG keyed with kseed (the caller's injected randomness), written
// centred into ss and es (the proof's witness); returns sk and pk0 = e - a s over Q.
func SeededKeyPair(P ckks.Parameters, a ring.Poly, kseed []byte, ss, es []int64) (*rlwe.SecretKey, ring.Poly) {
	prng := he.KeyedPRNG(kseed, "key seed")
	he.SampleCentred(P, prng, P.Xs(), ss)
	he.SampleCentred(P, prng, P.Xe(), es)
	r := P.RingQ()
	sQ, eQ := he.PolyFromInts(r, ss), he.PolyFromInts(r, es)
	r.NTT(sQ, sQ)
	r.NTT(eQ, eQ)
	pk0 := r.NewPoly()
	r.MulCoeffsBarrett(a, sQ, pk0)
	r.Sub(eQ, pk0, pk0)
	sk := rlwe.NewSecretKey(P)
	r.MForm(sQ, sk.Value.Q)
	if rp := P.RingP(); rp != nil {
		sP := he.PolyFromInts(rp, ss)
		rp.NTT(sP, sP)
		rp.MForm(sP, sk.Value.P)
	}
	return sk, pk0
}

// PK0FromResidues reads pk0 from coefficient-domain residues (QCount rows of N, each
// below its prime) into the NTT domain.
func PK0FromResidues(P ckks.Parameters, src []uint64) ring.Poly {
	r := P.RingQ()
	N := P.N()
	p := r.NewPoly()
	for l, q := range P.Q() {
		row := src[l*N : (l+1)*N]
		for j, c := range row {
			if c >= q {
				status.Fail(status.Argument, "pk0 residue %d of prime %d is not reduced", j, l)
			}
		}
		copy(p.Coeffs[l], row)
	}
	r.NTT(p, p)
	return p
}

// KeyImage returns F(s, e) = e - a s (NTT, standard form) for one argument z = (s, e)
// in the limb layout of popk.go (ls[0] limbs of s, then ls[1] limbs of e).
func KeyImage(r *ring.Ring, pk *rlwe.PublicKey, ls [2]int, z []int64, N int) ring.Poly {
	s, e := r.NewPoly(), r.NewPoly()
	Poly(r, z[:ls[0]*N], ls[0], N, nil, false, s)
	Poly(r, z[ls[0]*N:(ls[0]+ls[1])*N], ls[1], N, nil, false, e)
	r.NTT(s, s)
	r.NTT(e, e)
	// pk is stored in NTT and Montgomery form: the Montgomery product gives a*s in NTT.
	r.MulCoeffsMontgomeryThenSub(s, pk.Value[1].Q, e)
	return e
}

// KeyHash hashes A_k = F(z_k) - chal[k] pk0, k = 0..rows-1 (NTT residues over all Q
// primes) with SHA-256 (32 bytes); ch nil: A_k = F(z_k) (the prover's masks).
func KeyHash(r *ring.Ring, pk *rlwe.PublicKey, ls [2]int, rows int, zs []int64, ch []byte) []byte {
	N := r.N()
	per := (ls[0] + ls[1]) * N
	var pk0 ring.Poly
	if ch != nil {
		for _, b := range ch {
			if b > 1 {
				status.Fail(status.Argument, "challenge entries must be 0 or 1")
			}
		}
		pk0 = r.NewPoly()
		r.IMForm(pk.Value[0].Q, pk0)
	}
	hdr := make([]byte, 8)
	binary.LittleEndian.PutUint32(hdr[0:], uint32(r.Level()))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(rows))
	return HashRows(r, rows, "secinfer/crisp-pk/v1", hdr, func(k int) []ring.Poly {
		im := KeyImage(r, pk, ls, zs[k*per:(k+1)*per], N)
		if ch != nil && ch[k] == 1 {
			r.Sub(im, pk0, im)
		}
		return []ring.Poly{im}
	})
}
