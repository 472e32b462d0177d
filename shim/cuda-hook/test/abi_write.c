/* abi_write — write a usage region and a one-GPU limits file, as the node side does,
 * from tessera_abi.h itself. For scripts with no Go toolchain (hack/gpu-check.sh).
 * usage: abi_write <region> <limits> <GPU-uuid> <cap-bytes> */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "abi_files.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s <region> <limits> <GPU-uuid> <cap-bytes>\n", argv[0]);
        return 2;
    }
    char *end;
    uint64_t cap = strtoull(argv[4], &end, 10);
    if (*argv[4] == '\0' || *end != '\0') {
        fprintf(stderr, "abi_write: cap-bytes \"%s\" is not a number\n", argv[4]);
        return 2;
    }
    const char *uuids[] = {argv[3]};
    const uint64_t caps[] = {cap};
    const uint32_t cores[] = {0};
    abi_write_region(argv[1]);
    abi_write_limits(argv[2], 1, uuids, caps, cores);
    return 0;
}
