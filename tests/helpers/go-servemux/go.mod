module egress-proxies/tests/go-servemux

go 1.22
