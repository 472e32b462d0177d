/*
 * fg_config.h — the simulated node's device list, parsed from the environment.
 *
 * FAKEGPU_DEVICES = "name:mem_mib:sm_count;name:mem_mib:sm_count;..."
 * FAKEGPU_CONFIG  = path of a file with one such spec per line ('#' comments).
 * Neither set: one "NVIDIA H200", 143771 MiB, 132 SMs.
 * FAKEGPU_UUID_SEED (optional) changes the derived UUIDs.
 */
#ifndef FAKEGPU_CONFIG_H
#define FAKEGPU_CONFIG_H

#include <stdint.h>

#define FG_MAX_DEVICES 16
#define FG_NAME_LEN 96
#define FG_UUID_LEN 41 /* "GPU-" + 36 + NUL */
#define FG_BUSID_LEN 16 /* "00000000:18:00.0" */

struct fg_device_cfg {
    char name[FG_NAME_LEN];
    uint64_t mem_bytes;
    int sm_count;
    int cc_major, cc_minor;
    unsigned char uuid[16];
    char uuid_str[FG_UUID_LEN];
    unsigned int pci_domain, pci_bus, pci_device;
    char bus_id[FG_BUSID_LEN + 1];
};

struct fg_config {
    int count;
    struct fg_device_cfg dev[FG_MAX_DEVICES];
};

/* Parses the environment into *cfg. Returns 0, or -1 with a message naming the
 * variable/file, entry/line and field written to err. */
int fg_config_load(struct fg_config *cfg, char *err, unsigned errlen);

/* Parses one spec list (entries separated by sep) — exposed for the tests. */
int fg_config_parse_list(struct fg_config *cfg, const char *text, char sep, const char *origin, char *err,
                         unsigned errlen);

/* FAKEGPU_CONTEXT_MIB (default 0) in bytes; -1 with a message if malformed. */
int fg_config_context_mib(uint64_t *bytes, char *err, unsigned errlen);

/* FAKEGPU_SLICE_US (default 1024) in ns: the time slice of a context on a
 * shared device; -1 with a message if malformed. */
int fg_config_slice_ns(uint64_t *ns, char *err, unsigned errlen);

/* UUID of device index under seed: see docs/fakegpu.md for the formula. */
void fg_uuid_derive(const char *seed, int index, unsigned char out[16]);

/* Hash of the device list, stored in the node state to detect mismatched configs. */
uint64_t fg_config_fingerprint(const struct fg_config *cfg);

#endif
