/* container.c — trust anchored on /etc/ld.so.preload: the plugin mounts it
 * read-only from its state directory, and a container that replaces it does not
 * load the hook at all, so it proves nothing to forge the rest. Every other file
 * must be a mount of exactly its fixed path from that same directory, on the same
 * filesystem: a pod volume stacked over /run/tessera or one of its files comes from
 * kubelet's pod directories and is refused, as is a hidden mount. Runs once, at
 * initialisation; static buffers keep the large entries off small thread stacks. */
#include "container.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mountinfo.h"

#define MOUNTINFO_MAX (4u << 20) /* a node with tens of thousands of mounts */
#define HOOK_CONF_MAX 4096

static const char *const plugin_paths[] = {HOOK_PRELOAD_PATH, HOOK_CONF_PATH, HOOK_REGION_PATH, HOOK_LIMITS_PATH,
                                           HOOK_CORE_LIMITS_PATH, HOOK_CORE_REGION_PATH};

static struct mount_entry g_anchor, g_entry;
static char g_dir[PATH_MAX];

/* Reads a whole file into a NUL-terminated malloc'd buffer; NULL on error. */
static char *read_file(const char *path, size_t max, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    size_t cap = 16384, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (n + 1 == cap) {
            char *more = cap < max ? realloc(buf, cap * 2) : NULL;
            if (more == NULL) {
                free(buf);
                buf = NULL;
                errno = EFBIG;
                break;
            }
            buf = more;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            buf = NULL;
        } else if (r == 0) {
            buf[n] = '\0';
            break;
        } else {
            n += (size_t)r;
        }
    }
    int e = errno;
    close(fd);
    errno = e;
    if (len != NULL)
        *len = n;
    return buf;
}

/* The ID of the mount path resolves to, from /proc/self/fdinfo (Linux >= 3.15). */
static int mount_id_of(const char *path)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char info[64];
    snprintf(info, sizeof info, "/proc/self/fdinfo/%d", fd);
    char *text = read_file(info, 65536, NULL);
    close(fd);
    if (text == NULL)
        return -1;
    const char *m = strstr(text, "\nmnt_id:");
    int id = m != NULL ? atoi(m + 8) : -1;
    free(text);
    return id > 0 ? id : -1;
}

/* A file replaced on the host after it was mounted shows as "<path>//deleted". */
static void strip_deleted(char *root)
{
    size_t n = strlen(root);
    if (n > 9 && strcmp(root + n - 9, "//deleted") == 0)
        root[n - 9] = '\0';
}

/* Finds the mount path resolves to and checks that it is a mount of exactly path,
 * read-only unless writable. */
static int visible_mount(const char *text, const char *path, bool writable, struct mount_entry *e, char *err,
                         size_t errlen)
{
    int id = mount_id_of(path);
    if (id < 0) {
        snprintf(err, errlen, "%s: the device plugin mounted it but it cannot be opened (%s): hidden by another mount?",
                 path, strerror(errno));
        return -1;
    }
    if (mountinfo_find_id(text, id, e) != 0) {
        snprintf(err, errlen, "%s: its mount %d is not in /proc/self/mountinfo", path, id);
        return -1;
    }
    if (strcmp(e->point, path) != 0) {
        snprintf(err, errlen, "%s: resolves to a mount at %s, not to the device plugin's: a volume stacked over it?",
                 path, e->point);
        return -1;
    }
    if (!writable && !e->read_only) {
        snprintf(err, errlen, "%s: mounted writable; the device plugin mounts it read-only", path);
        return -1;
    }
    strip_deleted(e->root);
    return 0;
}

/* path's mount must come from the anchor's directory (g_dir) on its filesystem. */
static int from_plugin(const char *path, const struct mount_entry *e, char *err, size_t errlen)
{
    size_t n = strlen(g_dir);
    if (e->major != g_anchor.major || e->minor != g_anchor.minor || strncmp(e->root, g_dir, n) != 0 ||
        e->root[n] != '/') {
        snprintf(err, errlen, "%s: mounted from %s on %u:%u, not from the device plugin's %s on %u:%u", path, e->root,
                 e->major, e->minor, g_dir, g_anchor.major, g_anchor.minor);
        return -1;
    }
    return 0;
}

static int read_hook_conf(struct hook_config *cfg, char *err, size_t errlen)
{
    size_t len;
    char *text = read_file(HOOK_CONF_PATH, HOOK_CONF_MAX, &len);
    if (text == NULL) {
        snprintf(err, errlen, "%s: %s", HOOK_CONF_PATH, strerror(errno));
        return -1;
    }
    int r = config_parse_hookconf(cfg, text, len, err, errlen);
    free(text);
    return r;
}

/* A container's file must be where the plugin lays it out (internal/deviceplugin/
 * allocation): <dir>/containers/<allocation>/<name>. Anything else merely under the
 * state directory is refused: a stateDir whose filesystem also holds pod-writable
 * directories below it (kubelet's volumes under stateDir /var/lib) would otherwise
 * pass a subPath volume, and another file of the container cannot stand in for it. */
static int container_file(const char *path, const struct mount_entry *e, char *err, size_t errlen)
{
    static const char sub[] = "/containers/";
    const char *rest = e->root + strlen(g_dir), *name = strrchr(path, '/') + 1;
    const char *slash = strncmp(rest, sub, sizeof sub - 1) == 0 ? strchr(rest + sizeof sub - 1, '/') : NULL;
    if (slash == NULL || slash == rest + sizeof sub - 1 || strcmp(slash + 1, name) != 0) {
        snprintf(err, errlen, "%s: mounted from %s, not from the device plugin's %s/containers/<allocation>/%s", path,
                 e->root, g_dir, name);
        return -1;
    }
    return 0;
}

/* An optional file: used when the plugin mounted it, refused when tampered with.
 * A runtime follows the image's symlinks when it mounts (runc resolves them in the
 * rootfs), so the plugin's mount of path may sit elsewhere and the symlink be
 * re-pointed or removed later: whether the plugin mounted it is told by the mount's
 * source (a file of that name from the anchor's directory), not by its point. */
static int plugin_file(const char *text, const char *path, bool writable, char *out, bool *present, char *err,
                       size_t errlen)
{
    *present = false;
    if (!mountinfo_has_point(text, path) &&
        !mountinfo_has_root(text, g_dir, g_anchor.major, g_anchor.minor, strrchr(path, '/') + 1))
        return 0;
    if (visible_mount(text, path, writable, &g_entry, err, errlen) != 0 ||
        from_plugin(path, &g_entry, err, errlen) != 0 || container_file(path, &g_entry, err, errlen) != 0)
        return -1;
    snprintf(out, PATH_MAX, "%s", path);
    *present = true;
    return 0;
}

/* hook.conf: a read-only mount from beside the anchor. A container whose Allocate
 * response predates hook.conf (kubelet keeps a pod's responses for the pod's
 * lifetime and reuses them when a container restarts, so after an upgrade) has no
 * mount of it at all, not even a hidden or moved one: *present is false and cfg
 * gets hook.conf's defaults. */
static int plugin_conf(const char *text, struct hook_config *cfg, bool *present, char *err, size_t errlen)
{
    *present = mountinfo_has_point(text, HOOK_CONF_PATH) ||
               mountinfo_has_root(text, g_dir, g_anchor.major, g_anchor.minor, "hook.conf");
    if (!*present)
        return config_parse_hookconf(cfg, "", 0, err, errlen);
    if (visible_mount(text, HOOK_CONF_PATH, false, &g_entry, err, errlen) != 0 ||
        from_plugin(HOOK_CONF_PATH, &g_entry, err, errlen) != 0)
        return -1;
    if (strchr(g_entry.root + strlen(g_dir) + 1, '/') != NULL) {
        snprintf(err, errlen, "%s: mounted from %s, not from beside the device plugin's ld.so.preload in %s",
                 HOOK_CONF_PATH, g_entry.root, g_dir);
        return -1;
    }
    return read_hook_conf(cfg, err, errlen);
}

/* 1 when the mounts are the plugin's and fill cfg, 0 when only ld.so.preload is
 * (no hook.conf, region or limits: a plugin from before hook.conf gave a container
 * of whole GPUs nothing else, and outside Kubernetes a runtime may mount just that;
 * neither has a cap the environment could lift), -1 when they do not check out. */
static int check_mounts(const char *text, struct hook_config *cfg, char *err, size_t errlen)
{
    bool conf;
    if (visible_mount(text, HOOK_PRELOAD_PATH, false, &g_anchor, err, errlen) != 0)
        return -1;
    snprintf(g_dir, sizeof g_dir, "%s", g_anchor.root);
    char *slash = strrchr(g_dir, '/');
    *slash = '\0'; /* root starts with '/': "/ld.so.preload" leaves "" (the filesystem's root) */
    if (plugin_conf(text, cfg, &conf, err, errlen) != 0)
        return -1;
    if (plugin_file(text, HOOK_REGION_PATH, true, cfg->region_path, &cfg->has_region, err, errlen) != 0 ||
        plugin_file(text, HOOK_LIMITS_PATH, false, cfg->limits_path, &cfg->has_limits, err, errlen) != 0 ||
        plugin_file(text, HOOK_CORE_LIMITS_PATH, false, cfg->core_limits_path, &cfg->has_core_limits, err,
                    errlen) != 0 ||
        plugin_file(text, HOOK_CORE_REGION_PATH, true, cfg->core_region_path, &cfg->has_core_region, err,
                    errlen) != 0)
        return -1;
    if (cfg->has_limits && !cfg->has_region) {
        snprintf(err, errlen, "%s is mounted but %s is not: there is nowhere to account usage", HOOK_LIMITS_PATH,
                 HOOK_REGION_PATH);
        return -1;
    }
    return conf || cfg->has_region || cfg->has_limits || cfg->has_core_limits || cfg->has_core_region ? 1 : 0;
}

int container_config(struct hook_config *cfg, char *err, size_t errlen)
{
    char *text = read_file("/proc/self/mountinfo", MOUNTINFO_MAX, NULL);
    if (text == NULL) {
        if (access("/run/tessera", F_OK) != 0)
            return 0; /* no /proc and nothing of ours: not a container of the plugin */
        snprintf(err, errlen, "/proc/self/mountinfo: %s; cannot check the device plugin's mounts", strerror(errno));
        return -1;
    }
    /* The plugin's ld.so.preload mounted anywhere counts too: an image symlink at
     * /etc/ld.so.preload or /run/tessera moves the runtime's mounts off the fixed
     * paths, which must not turn the pod's environment back on. */
    bool ours = mountinfo_has_root(text, NULL, 0, 0, "ld.so.preload");
    for (size_t i = 0; i < sizeof plugin_paths / sizeof plugin_paths[0] && !ours; i++)
        ours = mountinfo_has_point(text, plugin_paths[i]);
    int r = ours ? check_mounts(text, cfg, err, errlen) : 0;
    free(text);
    return r;
}
