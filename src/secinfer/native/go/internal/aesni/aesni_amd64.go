package aesni

// encrypt8 encrypts the eight 16-byte blocks at buf in place with the round keys at rk.
//
//go:noescape
func encrypt8(rk *byte, buf *byte)

func hasAESNI() bool

var useAsm = hasAESNI()
