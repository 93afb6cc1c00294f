/*
 * Writing what the library writes out (snapshots) to a file descriptor
 * that may be a pipe. A write to a pipe whose reader is gone raises
 * SIGPIPE, whose default action ends the process; a library must report
 * that as an error instead, and leave the caller's signal state alone.
 */
#ifndef CPOOL_IO_H
#define CPOOL_IO_H

#include <stddef.h>

/* Writes all `len` bytes of `data` to `fd`, retrying short writes and
 * EINTR. Returns 0, or the errno of the failure (EPIPE for a pipe without
 * reader, EIO for a write that wrote nothing). SIGPIPE is blocked in the
 * calling thread meanwhile; one that the write raised is taken back unless
 * it was pending before, and the thread's mask is restored: the caller's
 * handler, mask and pending signals are as they were. */
int cpool__write_all(int fd, const void *data, size_t len);

#endif /* CPOOL_IO_H */
