// rill/core/sanitizers.hpp — which sanitizer the including translation unit is compiled
// with, for GCC and clang alike.
//
// Defines:
//   RILL_ASAN   1 under AddressSanitizer (-fsanitize=address), else 0
//   RILL_TSAN   1 under ThreadSanitizer (-fsanitize=thread), else 0
// GCC says so with __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__; clang 14 defines neither
// and answers __has_feature(address_sanitizer) and __has_feature(thread_sanitizer)
// instead (clang's AddressSanitizer docs, "Conditional Compilation with
// __has_feature(address_sanitizer)").
//
// Example (compiled by tests/banner_examples.py):
//   #include <rill/core/sanitizers.hpp>
//   // Shadow memory and quarantines: the resident size says little about the program's.
//   constexpr bool sanitized = RILL_ASAN || RILL_TSAN;
//   static_assert(!(RILL_ASAN && RILL_TSAN), "ASan and TSan cannot be combined");
//
// Thread safety: macros only, evaluated at compile time.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define RILL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RILL_ASAN 1
#endif
#endif
#ifndef RILL_ASAN
#define RILL_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define RILL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RILL_TSAN 1
#endif
#endif
#ifndef RILL_TSAN
#define RILL_TSAN 0
#endif
