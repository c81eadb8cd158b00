//go:build !amd64

package aesni

var useAsm = false

func encrypt8(rk *byte, buf *byte) { panic("aesni: no assembly on this architecture") }
