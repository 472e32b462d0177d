/* mountinfo.h — the lines of /proc/<pid>/mountinfo the hook needs to tell the
 * device plugin's mounts from anything a container stacked over them. */
#ifndef HOOK_MOUNTINFO_H
#define HOOK_MOUNTINFO_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

struct mount_entry {
    int id;
    unsigned major, minor;
    bool read_only;        /* "ro" among the per-mount options */
    char root[PATH_MAX];   /* the mounted path inside its filesystem, unescaped */
    char point[PATH_MAX];  /* where it is mounted, unescaped */
};

/* Parses one line (without its newline): "id parent major:minor root point options
 * [optional fields] - fstype source super-options". Returns 0, or -1 when the line
 * is malformed or a path does not fit. */
int mountinfo_parse_line(const char *line, size_t len, struct mount_entry *e);

/* The entry with mount ID id in the whole text; 0 when found, -1 when not (or the
 * line is malformed). */
int mountinfo_find_id(const char *text, int id, struct mount_entry *e);

/* Whether any entry of the text is mounted at point (hidden ones included). */
bool mountinfo_has_point(const char *text, const char *point);

/* Whether any entry mounts a path whose last component is name (a "//deleted"
 * suffix ignored) from below dir ("" is the filesystem's root) on major:minor,
 * wherever it is mounted; dir NULL matches any directory on any filesystem. */
bool mountinfo_has_root(const char *text, const char *dir, unsigned major, unsigned minor, const char *name);

#endif
