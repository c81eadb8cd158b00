// Package fastpack packs LWE ciphertexts into RLWE ciphertexts with automorphism key
// switches, and extracts (partially traced) LWE ciphertexts from RLWE ciphertexts, over
// Lattigo v6's power-of-two cyclotomic rings.  [SAFHIRE Sec. 2.3-2.4, 4.3-4.4]
//
// Notation. N = 2^logN, the ring Z_Q[X]/(X^N + 1), Galois group Z_2N^*. The packing tree
// has logN levels; level k = i + 1 (step i = 0 .. logN-1) merges ciphertexts whose output
// positions differ by h_i = N / 2^(i+1), with the shift X^(h_i) and the automorphism
// X -> X^(g_i), g_0 = 2N - 1 (X -> X^-1) and g_i = 5^(2^(i-1)) for i >= 1. Each g_i
// negates X^(h_i) and fixes X^(2 h_i), and the 2^logN products of subsets of {g_i} are
// exactly Z_2N^*, so the product over all levels of (1 + sigma_(g_i)) is the field trace
// Tr_(K/Q). This is the pairwise merge of Chen-Dai-Kim-Song (as in Lattigo's
// RingPackingEvaluator.Pack), re-implemented here for three reasons:
//
//  1. Partial trace extraction (extraction depth gamma). When the client also sends
//     encryptions of m(X^d) for every d in D_gamma = { products of subsets of
//     g_0 .. g_(gamma-1) } under the same key s(X), the server forms, without any key
//     switch, T_i = sum_(d in D_gamma) X^(-i d) Enc(m(X^d)) = Enc(prod_(k < gamma)
//     (1 + sigma_(g_k)) (m X^-i)). The first gamma tree levels are then free: they only add
//     X^(h_k) shifts. This is the power-of-two analogue of the paper's Lemma 1: the
//     client-side powers carry the lowest levels of the trace tower.
//  2. Noise. Lattigo multiplies every input by N^-1 mod Q before the tree, so the key-switch
//     noise added at level k is doubled by every later level (up to ~N times the
//     key-switch noise at the output). Here the two operands of every key-switched merge
//     are multiplied by 2^-1 mod Q instead: the exact part of a merge is twice the
//     projection of its operands, so halving keeps it exact, and the noise that a key
//     switch adds is an integer polynomial whose later traces and halvings return exactly
//     its projection: the output noise is the input noise plus one key-switch noise per
//     level, not N of them.
//  3. Memory and threads. The tree is evaluated depth first (two scratch ciphertexts per
//     level and worker instead of one ciphertext per input), inputs are read straight from
//     the caller's arrays, and the two halves of the top levels run on separate workers.
//
// Key switches: packing n = 2^l inputs at spread positions with depth gamma <= l costs
// (2^(l-gamma) - 1) + (logN - l) key switches; N inputs cost N/2^gamma - 1.
package fastpack

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/tuneinsight/lattigo/v6/core/rlwe"
	"github.com/tuneinsight/lattigo/v6/ring"
)

// MaxDepth is the largest extraction depth supported (2^MaxDepth client polynomials).
const MaxDepth = 4

// StepGalois returns g_i, the automorphism of tree step i (level i + 1).
func StepGalois(params rlwe.Parameters, i int) uint64 {
	if i == 0 {
		return uint64(2*params.N() - 1)
	}
	return params.GaloisElement(1 << (i - 1))
}

// PackGaloisElements lists the Galois elements that packing with extraction depth
// `depth` key-switches with (steps depth .. logN-1).
func PackGaloisElements(params rlwe.Parameters, depth int) []uint64 {
	out := []uint64{}
	for i := depth; i < params.LogN(); i++ {
		out = append(out, StepGalois(params, i))
	}
	return out
}

// PreTraceElements returns D_depth: element u is the product of g_k over the bits k of u.
// The client encrypts m(X^d) for every d in this list, in this order.
func PreTraceElements(params rlwe.Parameters, depth int) []uint64 {
	m := uint64(2 * params.N())
	out := make([]uint64, 1<<depth)
	for u := range out {
		d := uint64(1)
		for k := 0; k < depth; k++ {
			if u>>k&1 == 1 {
				d = d * StepGalois(params, k) % m
			}
		}
		out[u] = d
	}
	return out
}

// Batch is a batch of (partially traced) LWE ciphertexts in ring form at one level:
// member t is an RLWE ciphertext (c0, c1) of which only the coefficients of c0 at the
// positions k N/G (G = 2^Depth, k < G) matter; B holds those, A holds c1 in the
// coefficient domain. Layout: B[(t L + l) G + k], A[(t L + l) N + j], L = Level + 1.
// Member t decrypts (b_0 + (c1 s)_0 for depth 0) to its payload plus noise.
type Batch struct {
	N, Level, Depth, Count int
	B, A                   []uint64
}

// G returns the number of c0 coefficients kept per member.
func (b *Batch) G() int { return 1 << b.Depth }

// Check validates the shape and that every residue is reduced.
func (b *Batch) Check(ringQ *ring.Ring) error {
	L := b.Level + 1
	if b.Depth < 0 || b.Depth > MaxDepth {
		return fmt.Errorf("extraction depth %d out of [0, %d]", b.Depth, MaxDepth)
	}
	if len(b.B) != b.Count*L*b.G() || len(b.A) != b.Count*L*b.N {
		return fmt.Errorf("batch arrays have the wrong size")
	}
	for t := 0; t < b.Count; t++ {
		for l := 0; l < L; l++ {
			q := ringQ.SubRings[l].Modulus
			for _, v := range b.B[(t*L+l)*b.G() : (t*L+l+1)*b.G()] {
				if v >= q {
					return fmt.Errorf("member %d: b residue not reduced modulo q_%d", t, l)
				}
			}
			for _, v := range b.A[(t*L+l)*b.N : (t*L+l+1)*b.N] {
				if v >= q {
					return fmt.Errorf("member %d: a residue not reduced modulo q_%d", t, l)
				}
			}
		}
	}
	return nil
}

// rotAcc adds sign * X^(-e) src into dst (coefficient domain, one limb, 0 <= e < 2N):
// coefficient j of X^-e src is src[(j + e) mod N], negated when (j + e) mod 2N >= N.
func rotAcc(dst, src []uint64, e int, q uint64) {
	n := len(src)
	neg := e >= n
	e %= n
	add := func(d []uint64, s []uint64, negate bool) {
		if negate {
			for j := range d {
				x := d[j] + q - s[j]
				if x >= q {
					x -= q
				}
				d[j] = x
			}
		} else {
			for j := range d {
				x := d[j] + s[j]
				if x >= q {
					x -= q
				}
				d[j] = x
			}
		}
	}
	add(dst[:n-e], src[e:], neg)
	add(dst[n-e:], src[:e], !neg)
}

// coeffAt returns coefficient j of X^(-e) src (one limb).
func coeffAt(src []uint64, j, e int, q uint64) uint64 {
	n := len(src)
	m := (j + e) % (2 * n)
	if m < n {
		return src[m]
	}
	v := src[m-n]
	if v == 0 {
		return 0
	}
	return q - v
}

// ExtractSource is one input chunk: for every u < 2^depth, the coefficient-domain
// residues (limb-major, (Level+1) x N) of c0 and c1 of Enc(m(X^(D[u]))).
type ExtractSource struct {
	C0, C1 [][][]uint64 // [u][l][j]
}

// Extract fills out (shape set by the caller: Count, Depth, Level, N) with member t =
// T_(index[t]) of chunk chunk[t]: sum_u X^(-index[t] D[u]) Enc(m(X^D[u])), an encryption
// of prod_(k < depth) (1 + sigma_(g_k)) (m X^-index[t]).  [SAFHIRE Sec. 4.4, Lemma 1]
func Extract(params rlwe.Parameters, srcs []ExtractSource, chunk, index []int, out *Batch, threads int) error {
	N, L, G := out.N, out.Level+1, out.G()
	D := PreTraceElements(params, out.Depth)
	moduli := params.RingQ().ModuliChain()[:L]
	for t := range chunk {
		if chunk[t] < 0 || chunk[t] >= len(srcs) {
			return fmt.Errorf("member %d: chunk %d out of [0, %d)", t, chunk[t], len(srcs))
		}
		if index[t] < 0 || index[t] >= N {
			return fmt.Errorf("member %d: coefficient %d out of [0, %d)", t, index[t], N)
		}
	}
	return parallelFor(out.Count, threads, func(t int) {
		src := srcs[chunk[t]]
		for l := 0; l < L; l++ {
			q := moduli[l]
			a := out.A[(t*L+l)*N : (t*L+l+1)*N]
			bv := out.B[(t*L+l)*G : (t*L+l+1)*G]
			for j := range a {
				a[j] = 0
			}
			for k := range bv {
				bv[k] = 0
			}
			for u, d := range D {
				e := int((uint64(index[t]) * d) % uint64(2*N)) // X^(-e), e = i d
				rotAcc(a, src.C1[u][l], e, q)
				for k := 0; k < G; k++ {
					x := bv[k] + coeffAt(src.C0[u][l], k*(N/G), e, q)
					if x >= q {
						x -= q
					}
					bv[k] = x
				}
			}
		}
	})
}

// parallelFor runs f(0..n-1) on `threads` goroutines; a panic in a worker is returned as
// an error (it would otherwise bypass the cgo export's recover and end the process).
func parallelFor(n, threads int, f func(i int)) (err error) {
	if threads <= 1 || n < 2 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return nil
	}
	var wg sync.WaitGroup
	var next int64 = -1
	var mu sync.Mutex
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					err = fmt.Errorf("internal error in an extraction worker: %v", r)
					mu.Unlock()
				}
			}()
			for {
				i := int(atomic.AddInt64(&next, 1))
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
	return err
}

// Packer holds the precomputed constants for one parameter set and one key set.
type Packer struct {
	params rlwe.Parameters
	eval   *rlwe.Evaluator
	mu     sync.Mutex
	consts map[int]*levelConsts
}

type levelConsts struct {
	ringQ    *ring.Ring
	xh       []ring.Poly // NTT(X^(h_i)), Montgomery form, per step i
	xhHalf   []ring.Poly // 2^-1 NTT(X^(h_i)), Montgomery form
	xg       []ring.Poly // NTT(X^(k N / 2^MaxDepth)) (regular form) for k < 2^MaxDepth
	inv2Mont []uint64
}

// NewPacker needs an evaluation key set holding the Galois keys of PackGaloisElements
// for the depths that will be used.
func NewPacker(params rlwe.Parameters, evk rlwe.EvaluationKeySet) *Packer {
	return &Packer{params: params, eval: rlwe.NewEvaluator(params, evk), consts: map[int]*levelConsts{}}
}

func (p *Packer) levelConsts(level int) *levelConsts {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.consts[level]; ok {
		return c
	}
	r := p.params.RingQ().AtLevel(level)
	N, logN := r.N(), p.params.LogN()
	c := &levelConsts{ringQ: r}
	for l, s := range r.SubRings[:level+1] {
		c.inv2Mont = append(c.inv2Mont, ring.MForm((s.Modulus+1)/2, s.Modulus, s.BRedConstant))
		_ = l
	}
	mono := func(e int, mont bool) ring.Poly {
		x := r.NewPoly()
		for l, s := range r.SubRings[:level+1] {
			if mont {
				x.Coeffs[l][e] = ring.MForm(1, s.Modulus, s.BRedConstant)
			} else {
				x.Coeffs[l][e] = 1
			}
		}
		r.NTT(x, x)
		return x
	}
	for i := 0; i < logN; i++ {
		h := N >> (i + 1)
		x := mono(h, true)
		xh := r.NewPoly()
		for l, s := range r.SubRings[:level+1] {
			s.MulScalarMontgomery(x.Coeffs[l], c.inv2Mont[l], xh.Coeffs[l])
		}
		c.xh = append(c.xh, x)
		c.xhHalf = append(c.xhHalf, xh)
	}
	for k := 0; k < 1<<MaxDepth; k++ {
		c.xg = append(c.xg, mono(k*(N>>MaxDepth), false))
	}
	p.consts[level] = c
	return c
}

type worker struct {
	eval    *rlwe.Evaluator
	slotA   []*rlwe.Ciphertext
	slotB   []*rlwe.Ciphertext
	tmp, ks *rlwe.Ciphertext
}

func (p *Packer) newWorker(level int) *worker {
	logN := p.params.LogN()
	w := &worker{eval: p.eval.ShallowCopy()}
	nw := func() *rlwe.Ciphertext {
		ct := rlwe.NewCiphertext(p.params, 1, level)
		ct.IsNTT = true
		return ct
	}
	for i := 0; i < logN; i++ {
		w.slotA = append(w.slotA, nw())
		w.slotB = append(w.slotB, nw())
	}
	w.tmp, w.ks = nw(), nw()
	return w
}

type packJob struct {
	p       *Packer
	c       *levelConsts
	b       *Batch
	depth   int
	workers []*worker
	ks      int64
	err     error
	errMu   sync.Mutex
}

// Pack returns one RLWE ciphertext (NTT domain, at b.Level) whose coefficient positions[t]
// encrypts the payload of member t and whose other coefficients encrypt zero (up to
// noise), and the number of key switches it made. Positions must be distinct in [0, N).
// The members must be traced to b.Depth (see Extract); the output payload scale is the
// members' payload scale (no factor N or 2^depth).  [SAFHIRE Sec. 4.4 "Fast packing"]
func (p *Packer) Pack(b *Batch, positions []int, threads int) (*rlwe.Ciphertext, int, error) {
	N, logN := p.params.N(), p.params.LogN()
	if b.N != N || b.Level < 0 || b.Level > p.params.MaxLevel() {
		return nil, 0, fmt.Errorf("batch does not match the parameter set")
	}
	if len(positions) != b.Count || b.Count == 0 {
		return nil, 0, fmt.Errorf("need one position per member (%d for %d members)", len(positions), b.Count)
	}
	if err := b.Check(p.params.RingQ().AtLevel(b.Level)); err != nil {
		return nil, 0, err
	}
	seen := make(map[int]bool, len(positions))
	for _, pos := range positions {
		if pos < 0 || pos >= N {
			return nil, 0, fmt.Errorf("position %d out of [0, %d)", pos, N)
		}
		if seen[pos] {
			return nil, 0, fmt.Errorf("position %d used twice", pos)
		}
		seen[pos] = true
	}
	for i := b.Depth; i < logN; i++ {
		if _, err := p.eval.CheckAndGetGaloisKey(StepGalois(p.params, i)); err != nil {
			return nil, 0, fmt.Errorf("packing at depth %d needs the Galois key for %d", b.Depth, StepGalois(p.params, i))
		}
	}
	if threads < 1 {
		threads = 1
	}
	if threads > 64 {
		threads = 64
	}
	job := &packJob{p: p, c: p.levelConsts(b.Level), b: b, depth: b.Depth}
	for w := 0; w < threads; w++ {
		job.workers = append(job.workers, p.newWorker(b.Level))
	}
	keys := make([]int, b.Count) // member index per key, sorted by position not needed
	for t := range keys {
		keys[t] = t
	}
	out := rlwe.NewCiphertext(p.params, 1, b.Level)
	out.IsNTT = true
	if !job.node(logN-1, 0, keys, positions, 0, threads, out) {
		return nil, 0, fmt.Errorf("nothing to pack")
	}
	if job.err != nil {
		return nil, 0, job.err
	}
	return out, int(job.ks), nil
}

func (j *packJob) recoverInto() {
	if r := recover(); r != nil {
		j.setErr(fmt.Errorf("internal error in a packing worker: %v", r))
	}
}

func (j *packJob) setErr(err error) {
	j.errMu.Lock()
	if j.err == nil {
		j.err = err
	}
	j.errMu.Unlock()
}

// leaf writes member t as an NTT-domain ciphertext into dst.
func (j *packJob) leaf(t int, w *worker, dst *rlwe.Ciphertext) {
	b, c := j.b, j.c
	N, L, G := b.N, b.Level+1, b.G()
	for l, s := range c.ringQ.SubRings[:L] {
		c0 := dst.Value[0].Coeffs[l]
		bv := b.B[(t*L+l)*G : (t*L+l+1)*G]
		for x := range c0 {
			c0[x] = bv[0] // NTT of a constant is that constant everywhere
		}
		for k := 1; k < G; k++ {
			if bv[k] != 0 {
				s.MulScalarMontgomeryThenAdd(c.xg[k*((1<<MaxDepth)/G)].Coeffs[l], ring.MForm(bv[k], s.Modulus, s.BRedConstant), c0)
			}
		}
		c1 := dst.Value[1].Coeffs[l]
		copy(c1, b.A[(t*L+l)*N:(t*L+l+1)*N])
		s.NTT(c1, c1)
	}
}

// coeffGroup writes, in the coefficient domain (limb 0 of level 0 when used by fusedMerge,
// every limb otherwise), sum_m X^(positions[m] - jkey) member_m: c1 in full and c0's
// 2^depth coefficients at the multiples of N / 2^depth (the shifts are multiples of it).
func (j *packJob) coeffGroup(l, jkey int, members, positions []int, c1, c0s []uint64) {
	b, c := j.b, j.c
	N, L, G := b.N, b.Level+1, b.G()
	stride := N / G
	q := c.ringQ.SubRings[l].Modulus
	for x := range c1 {
		c1[x] = 0
	}
	for k := range c0s {
		c0s[k] = 0
	}
	for _, t := range members {
		e := positions[t] - jkey // X^e, 0 <= e < N, multiple of stride
		// X^e A = X^-(2N - e) A
		rotAcc(c1, b.A[(t*L+l)*N:(t*L+l+1)*N], (2*N-e)%(2*N), q)
		bv := b.B[(t*L+l)*G : (t*L+l+1)*G]
		for k := 0; k < G; k++ {
			pos := k*stride + e
			v := bv[k]
			if pos >= N { // X^N = -1
				pos -= N
				if v != 0 {
					v = q - v
				}
			}
			x := c0s[pos/stride] + v
			if x >= q {
				x -= q
			}
			c0s[pos/stride] = x
		}
	}
}

// sparseNTT writes the NTT of sum_k vals[k] X^(k N / len(vals)) (len(vals) <= 2^MaxDepth).
func (j *packJob) sparseNTT(l int, vals, out []uint64) {
	s, c := j.c.ringQ.SubRings[l], j.c
	for x := range out {
		out[x] = vals[0] // NTT of a constant is that constant everywhere
	}
	step := (1 << MaxDepth) / len(vals)
	for k := 1; k < len(vals); k++ {
		if vals[k] != 0 {
			s.MulScalarMontgomeryThenAdd(c.xg[k*step].Coeffs[l], ring.MForm(vals[k], s.Modulus, s.BRedConstant), out)
		}
	}
}

// freeGroup writes sum_m X^(positions[m] - jkey) member_m (NTT domain) into dst: the
// node of the last free step, accumulated in the coefficient domain, one NTT.
func (j *packJob) freeGroup(jkey int, members, positions []int, w *worker, dst *rlwe.Ciphertext) {
	G := j.b.G()
	c0s := make([]uint64, G)
	for l, s := range j.c.ringQ.SubRings[:j.b.Level+1] {
		c1 := dst.Value[1].Coeffs[l]
		j.coeffGroup(l, jkey, members, positions, c1, c0s)
		s.NTT(c1, c1)
		j.sparseNTT(l, c0s, dst.Value[0].Coeffs[l])
	}
}

// fusedOK: the first key-switched merge (step depth) can take its operands in the
// coefficient domain when the set has one Q prime and base-2^w key-switching digits (no
// special prime), and 2^(depth+1) sparse c0 positions fit the precomputed monomials.
func (j *packJob) fusedOK() bool {
	if j.b.Level != 0 || j.p.params.PCount() != 0 || j.depth+1 > MaxDepth {
		return false
	}
	gk, err := j.p.eval.CheckAndGetGaloisKey(StepGalois(j.p.params, j.depth))
	return err == nil && gk.BaseTwoDecomposition > 0
}

// fusedMerge computes step i = depth for the groups `left` (bit h = N/2^(i+1) of the
// position clear) and `right` (set): u + KS(sigma_(g_i)(v)) with u, v = 2^-1 (a +- X^h b),
// forming a, b, u and v in the coefficient domain, so that the gadget digits of v's c1 are
// cut without an inverse NTT and the operands are never transformed: 3 or 4 NTTs (the
// digits, u's c1) instead of 6 or 7 (both operands, the key switch's inverse NTT, the
// digits). Same arithmetic as Lattigo's Automorphism with a base-two gadget key: digits
// (c1 >> w k) & (2^w - 1), NTT, Montgomery products with the key's gadget rows, + c0,
// then the automorphism's NTT-domain permutation.
func (j *packJob) fusedMerge(i, jkey int, left, right, positions []int, w *worker, dst *rlwe.Ciphertext) {
	b, c := j.b, j.c
	N, G := b.N, b.G()
	h := N >> (i + 1)
	s := c.ringQ.SubRings[0]
	q, inv2 := s.Modulus, c.inv2Mont[0]
	g := StepGalois(j.p.params, i)
	gk, err := j.p.eval.CheckAndGetGaloisKey(g)
	if err != nil {
		j.setErr(err)
		return
	}
	atomic.AddInt64(&j.ks, 1)
	a1, xb := w.slotA[0].Value[1].Coeffs[0], w.slotB[0].Value[1].Coeffs[0]
	a0s, b0s := make([]uint64, G), make([]uint64, G)
	j.coeffGroup(0, jkey, left, positions, a1, a0s)
	j.coeffGroup(0, jkey+h, right, positions, w.tmp.Value[0].Coeffs[0], b0s)
	for x := range xb {
		xb[x] = 0
	}
	rotAcc(xb, w.tmp.Value[0].Coeffs[0], 2*N-h, q) // X^h b (c1)
	u1, v1 := dst.Value[1].Coeffs[0], w.tmp.Value[1].Coeffs[0]
	s.SubThenMulScalarMontgomeryTwoModulus(a1, xb, inv2, v1)
	s.AddLazyThenMulScalarMontgomery(a1, xb, inv2, u1)
	// c0: a's entries at the multiples of N/G = 2h, X^h b's at 2h k + h (no wrap: h < 2h)
	u0s, v0s := make([]uint64, 2*G), make([]uint64, 2*G)
	for k := 0; k < G; k++ {
		ah := ring.MRed(a0s[k], inv2, q, s.MRedConstant)
		bh := ring.MRed(b0s[k], inv2, q, s.MRedConstant)
		u0s[2*k], v0s[2*k] = ah, ah
		u0s[2*k+1] = bh
		if bh != 0 {
			v0s[2*k+1] = q - bh
		}
	}
	// gadget product of v1
	el := gk.GadgetCiphertext.Value
	d0, d1 := w.ks.Value[0].Coeffs[0], w.ks.Value[1].Coeffs[0]
	digit := w.tmp.Value[0].Coeffs[0] // b's c1 is no longer needed
	pw2 := gk.BaseTwoDecomposition
	mask := uint64(1)<<pw2 - 1
	for k := range el[0] {
		ring.MaskVec(v1, k*pw2, mask, digit)
		s.NTTLazy(digit, digit)
		if k == 0 {
			s.MulCoeffsMontgomeryLazy(el[0][k][0].Q.Coeffs[0], digit, d0)
			s.MulCoeffsMontgomeryLazy(el[0][k][1].Q.Coeffs[0], digit, d1)
		} else {
			s.MulCoeffsMontgomeryLazyThenAddLazy(el[0][k][0].Q.Coeffs[0], digit, d0)
			s.MulCoeffsMontgomeryLazyThenAddLazy(el[0][k][1].Q.Coeffs[0], digit, d1)
		}
	}
	s.Reduce(d0, d0)
	s.Reduce(d1, d1)
	j.sparseNTT(0, v0s, digit) // + NTT(v0)
	s.Add(d0, digit, d0)
	idx := w.eval.AutomorphismIndex(g)
	r := c.ringQ
	r.AutomorphismNTTWithIndex(w.ks.Value[0], idx, w.tmp.Value[0])
	r.AutomorphismNTTWithIndex(w.ks.Value[1], idx, w.tmp.Value[1])
	s.NTT(u1, u1)
	s.Add(u1, w.tmp.Value[1].Coeffs[0], u1)
	u0 := dst.Value[0].Coeffs[0]
	j.sparseNTT(0, u0s, u0)
	s.Add(u0, w.tmp.Value[0].Coeffs[0], u0)
}

// node computes R(i, jkey) into dst: the merge of every member whose position is congruent
// to jkey modulo N / 2^(i+1), through steps 0..i. Returns false when there is none.
func (j *packJob) node(i, jkey int, members, positions []int, wid, nthreads int, dst *rlwe.Ciphertext) bool {
	if len(members) == 0 {
		return false
	}
	w := j.workers[wid]
	if i < 0 {
		j.leaf(members[0], w, dst)
		return true
	}
	if i == j.depth-1 {
		// steps 0..depth-1 are free (the client's powers did them): the node is
		// sum_m X^(pos_m - jkey) T_m, accumulated in the coefficient domain, one NTT
		j.freeGroup(jkey, members, positions, w, dst)
		return true
	}
	N := j.b.N
	h := N >> (i + 1)
	var left, right []int
	for _, t := range members {
		if positions[t]&h == 0 {
			left = append(left, t)
		} else {
			right = append(right, t)
		}
	}
	if i == j.depth && len(left) > 0 && len(right) > 0 && j.fusedOK() {
		j.fusedMerge(i, jkey, left, right, positions, w, dst)
		return true
	}
	a, bb := w.slotA[i], w.slotB[i]
	var hasA, hasB bool
	if nthreads > 1 && len(left) > 0 && len(right) > 0 {
		half := nthreads / 2
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer j.recoverInto() // a panic here would bypass the cgo export's recover
			hasA = j.node(i-1, jkey, left, positions, wid, half, a)
		}()
		hasB = j.node(i-1, jkey+h, right, positions, wid+half, nthreads-half, bb)
		wg.Wait()
	} else {
		hasA = j.node(i-1, jkey, left, positions, wid, nthreads, a)
		hasB = j.node(i-1, jkey+h, right, positions, wid, nthreads, bb)
	}
	j.merge(i, w, hasA, hasB, a, bb, dst)
	return hasA || hasB
}

// merge applies step i to the children a (positions with bit h_i clear) and b (set).
func (j *packJob) merge(i int, w *worker, hasA, hasB bool, a, b, dst *rlwe.Ciphertext) {
	r, c := j.c.ringQ, j.c
	free := i < j.depth
	if hasB {
		x := c.xhHalf[i]
		if free {
			x = c.xh[i]
		}
		r.MulCoeffsMontgomery(b.Value[0], x, b.Value[0])
		r.MulCoeffsMontgomery(b.Value[1], x, b.Value[1])
	}
	if free { // the client's powers already applied (1 + sigma_(g_i))
		switch {
		case hasA && hasB:
			r.Add(a.Value[0], b.Value[0], dst.Value[0])
			r.Add(a.Value[1], b.Value[1], dst.Value[1])
		case hasA:
			dst.Copy(a)
		case hasB:
			dst.Copy(b)
		}
		return
	}
	if hasA {
		for l, s := range r.SubRings[:r.Level()+1] {
			for k := 0; k < 2; k++ {
				s.MulScalarMontgomery(a.Value[k].Coeffs[l], c.inv2Mont[l], a.Value[k].Coeffs[l])
			}
		}
	}
	g := StepGalois(j.p.params, i)
	var src *rlwe.Ciphertext
	switch {
	case hasA && hasB:
		r.Sub(a.Value[0], b.Value[0], w.tmp.Value[0])
		r.Sub(a.Value[1], b.Value[1], w.tmp.Value[1])
		src = w.tmp
	case hasA:
		src = a
	default:
		src = b
	}
	if err := w.eval.Automorphism(src, g, w.ks); err != nil {
		j.setErr(err)
		return
	}
	atomic.AddInt64(&j.ks, 1)
	switch {
	case hasA && hasB:
		r.Add(a.Value[0], b.Value[0], dst.Value[0])
		r.Add(a.Value[1], b.Value[1], dst.Value[1])
		r.Add(dst.Value[0], w.ks.Value[0], dst.Value[0])
		r.Add(dst.Value[1], w.ks.Value[1], dst.Value[1])
	case hasA:
		r.Add(a.Value[0], w.ks.Value[0], dst.Value[0])
		r.Add(a.Value[1], w.ks.Value[1], dst.Value[1])
	default:
		r.Sub(b.Value[0], w.ks.Value[0], dst.Value[0])
		r.Sub(b.Value[1], w.ks.Value[1], dst.Value[1])
	}
}

// ExpectedKeySwitches is the closed form for spread positions: n = 2^l members at the
// positions t N / n cost (2^(l - depth) - 1) + (logN - l) key switches when depth <= l,
// and logN - depth otherwise.
func ExpectedKeySwitches(logN, n, depth int) int {
	l := bits.Len(uint(n - 1))
	if depth >= l {
		return logN - depth
	}
	return (1 << (l - depth)) - 1 + logN - l
}
