// Command main is the c-shared library secinfer loads (secinfer/native/lib.py): the thin cgo
// export layer of the HE and ZK code (its logic is in the packages he and popk), the handle
// table those exports share (handles.go), and the ZKB++ exports. The self-contained concerns
// are packages whose //export functions are linked in by the blank imports below (cgo
// exports from non-main packages are part of a c-shared build).
package main

import (
	_ "secinfer/native/fss"      // FSS kernels: fss_mmo_hash, fss_dcf_gen, fss_dcf_eval, fss_info
	_ "secinfer/native/gc"       // garbled circuits: he_gc_garble, he_gc_eval, he_gc_eval_opened, he_label_hash
	_ "secinfer/native/reclayer" // the tcp transport's record layer: rl_new, rl_send_small, rl_seal, rl_recv, ...
)

func main() {}
