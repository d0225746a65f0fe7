#pragma once
// cpp-httplib as Debian ships it: a compiled library built with TLS, zlib and brotli support. Its classes
// change layout with these macros, so every user must see the same ones as the library was built with
// (pkg-config cpp-httplib --cflags). Include httplib through this header only.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>
