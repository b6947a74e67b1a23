// Package adversarial is sbx's adversarial suite (issue 7): it attacks real sandboxes from
// inside and out and checks that the claim "deny by default" holds. Everything lives in the
// tests (go test ./test/adversarial, part of make test); this file only names the package.
//
// The groups, each ending with a summary line "GROUP: N passed, N failed":
//
//   - probes from inside: a static probe (./probe) asks the kernel for what an attacker
//     would want, as the sandbox user and as root without capabilities, and the tests
//     assert the reason of every refusal (the errno), not just the refusal;
//   - resource abuse: fork and memory bombs, full tmpfs, a large workspace, 1 GiB of output
//     and a command that ignores SIGTERM, after each of which the sandbox must still work;
//   - hostile configuration: refused settings in many spellings, through explain and create;
//   - hostile files: copies out of a sandbox that holds symlinks, FIFOs, sparse files, deep
//     trees and odd names;
//   - load and faults: concurrency, sbx killed mid-command, a dead engine, and a private
//     engine restarted under running sandboxes.
//
// A probe the host kernel cannot run (say it has no io_uring) is skipped as "cannot run
// here" with the reason, and is never counted as passed.
package adversarial
