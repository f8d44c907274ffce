#!/usr/bin/env python3
"""truncate/12.t and ftruncate/12.t of the C pjdfstest, which pjdfstest 0.2.2 does not carry.

Run by scripts/conformance.sh on a file of the msfs mount: ftruncate(2) and then truncate(2) to
999,999,999,999,999 bytes. That is past S3's largest object (5 TiB), so EFBIG is the only right
answer. truncate(2) runs only after ftruncate(2) refused, and the file is emptied and unlinked
before its last close: a length wrongly accepted is never committed to the store.
"""

import errno
import os
import sys

LENGTH = 999_999_999_999_999


def main():
    path = sys.argv[1]
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    results = {}
    for name, call in (("ftruncate", lambda: os.ftruncate(fd, LENGTH)),
                       ("truncate", lambda: os.truncate(path, LENGTH))):
        try:
            call()
            results[name] = "succeeded"
        except OSError as e:
            results[name] = errno.errorcode.get(e.errno, str(e.errno))
        if results[name] != "EFBIG":
            break
    os.ftruncate(fd, 0)
    os.unlink(path)
    os.close(fd)
    print(", ".join(f"{name}: {result}" for name, result in results.items()))
    return 0 if list(results.values()) == ["EFBIG", "EFBIG"] else 1


if __name__ == "__main__":
    sys.exit(main())
