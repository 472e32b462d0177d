// A statically linked program: the image builder must add no library for it.
package main

func main() {}
