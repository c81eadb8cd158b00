package fss

/*
#include <stddef.h>
#include <stdint.h>
int fss_aesni_supported(void);
void fss_aesni_setkey(const uint8_t *key);
void fss_aesni_mmo(uint64_t *buf, size_t nblocks);
*/
import "C"

import "unsafe"

// The C side of the MMO hash (fss_aes.c). aesniSetup runs once, inside mmoInit.

var aesniOK bool

func aesniSetup(key []byte) {
	if C.fss_aesni_supported() == 0 {
		return
	}
	C.fss_aesni_setkey((*C.uint8_t)(unsafe.Pointer(&key[0])))
	aesniOK = true
}

func aesniAvailable() bool { return aesniOK }

// aesniMMO hashes the len(buf)/2 blocks of buf in place. buf's memory holds no Go
// pointers and C keeps no reference to it after returning.
func aesniMMO(buf []uint64) {
	if len(buf) < 2 {
		return
	}
	C.fss_aesni_mmo((*C.uint64_t)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)/2))
}
