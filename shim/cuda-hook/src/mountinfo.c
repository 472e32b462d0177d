/* mountinfo.c — parse /proc/<pid>/mountinfo (proc(5)). Paths are written with
 * space, tab, newline and backslash as octal escapes (\040 ...). */
#include "mountinfo.h"

#include <string.h>

/* Copies the next space-separated field of [*p, end) to out (unescaped when
 * unescape), advancing *p past it. Returns its length, or -1 when missing or too
 * long for cap bytes with the terminator. */
static int next_field(const char **p, const char *end, char *out, size_t cap, bool unescape)
{
    const char *s = *p;
    while (s < end && *s == ' ')
        s++;
    if (s == end)
        return -1;
    size_t n = 0;
    while (s < end && *s != ' ') {
        char c = *s++;
        if (unescape && c == '\\' && end - s >= 3 && s[0] >= '0' && s[0] <= '3' && s[1] >= '0' && s[1] <= '7' &&
            s[2] >= '0' && s[2] <= '7') {
            c = (char)((s[0] - '0') << 6 | (s[1] - '0') << 3 | (s[2] - '0'));
            s += 3;
            if (c == '\0')
                return -1; /* the kernel never writes one; it would cut the path short */
        }
        if (n + 1 >= cap)
            return -1;
        out[n++] = c;
    }
    out[n] = '\0';
    *p = s;
    return (int)n;
}

static bool parse_uint(const char *s, const char *stop, unsigned long max, unsigned long *v)
{
    if (s == stop)
        return false;
    *v = 0;
    for (; s < stop; s++) {
        if (*s < '0' || *s > '9' || *v > (max - (unsigned long)(*s - '0')) / 10)
            return false;
        *v = *v * 10 + (unsigned long)(*s - '0');
    }
    return true;
}

static bool has_option(const char *opts, const char *want)
{
    size_t n = strlen(want);
    for (const char *o = opts; *o;) {
        const char *comma = strchr(o, ',');
        size_t len = comma ? (size_t)(comma - o) : strlen(o);
        if (len == n && strncmp(o, want, n) == 0)
            return true;
        if (comma == NULL)
            break;
        o = comma + 1;
    }
    return false;
}

int mountinfo_parse_line(const char *line, size_t len, struct mount_entry *e)
{
    const char *p = line, *end = line + len;
    char field[PATH_MAX];
    unsigned long id, parent, major, minor;
    /* Not memset: the paths are most of the entry, and every line of every scan
     * comes through here. */
    e->id = 0;
    e->major = e->minor = 0;
    e->read_only = false;
    e->root[0] = e->point[0] = '\0';
    if (next_field(&p, end, field, sizeof field, false) < 0 || !parse_uint(field, field + strlen(field), INT_MAX, &id) ||
        next_field(&p, end, field, sizeof field, false) < 0 ||
        !parse_uint(field, field + strlen(field), INT_MAX, &parent))
        return -1;
    if (next_field(&p, end, field, sizeof field, false) < 0)
        return -1;
    const char *colon = strchr(field, ':');
    if (colon == NULL || !parse_uint(field, colon, UINT_MAX, &major) ||
        !parse_uint(colon + 1, field + strlen(field), UINT_MAX, &minor))
        return -1;
    if (next_field(&p, end, e->root, sizeof e->root, true) < 0 || e->root[0] != '/' ||
        next_field(&p, end, e->point, sizeof e->point, true) < 0 || e->point[0] != '/' ||
        next_field(&p, end, field, sizeof field, false) < 0)
        return -1;
    e->read_only = has_option(field, "ro");
    /* Optional fields end at a lone "-", followed by fstype, source and options. */
    int n;
    while ((n = next_field(&p, end, field, sizeof field, false)) >= 0 && strcmp(field, "-") != 0)
        ;
    for (int i = 0; i < 3 && n >= 0; i++)
        n = next_field(&p, end, field, sizeof field, false);
    if (n < 0)
        return -1;
    e->id = (int)id;
    e->major = (unsigned)major;
    e->minor = (unsigned)minor;
    return 0;
}

/* Calls match on each line until it returns true; returns whether one did. */
static bool each_line(const char *text, bool (*match)(const char *, size_t, const void *, struct mount_entry *),
                      const void *arg, struct mount_entry *e)
{
    for (const char *s = text; *s;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        if (match(s, len, arg, e))
            return true;
        s += len + (nl != NULL);
    }
    return false;
}

static bool id_matches(const char *line, size_t len, const void *arg, struct mount_entry *e)
{
    return mountinfo_parse_line(line, len, e) == 0 && e->id == *(const int *)arg;
}

static bool point_matches(const char *line, size_t len, const void *arg, struct mount_entry *e)
{
    return mountinfo_parse_line(line, len, e) == 0 && strcmp(e->point, (const char *)arg) == 0;
}

int mountinfo_find_id(const char *text, int id, struct mount_entry *e)
{
    return each_line(text, id_matches, &id, e) ? 0 : -1;
}

bool mountinfo_has_point(const char *text, const char *point)
{
    struct mount_entry e;
    return each_line(text, point_matches, point, &e);
}

struct root_query {
    const char *dir, *name;
    unsigned major, minor;
};

static bool root_matches(const char *line, size_t len, const void *arg, struct mount_entry *e)
{
    const struct root_query *q = arg;
    if (mountinfo_parse_line(line, len, e) != 0)
        return false;
    size_t n = strlen(e->root), m = strlen(q->name);
    if (n > 9 && strcmp(e->root + n - 9, "//deleted") == 0)
        e->root[n -= 9] = '\0';
    if (n <= m || e->root[n - m - 1] != '/' || strcmp(e->root + n - m, q->name) != 0)
        return false;
    if (q->dir == NULL)
        return true;
    size_t d = strlen(q->dir);
    return e->major == q->major && e->minor == q->minor && strncmp(e->root, q->dir, d) == 0 && e->root[d] == '/';
}

bool mountinfo_has_root(const char *text, const char *dir, unsigned major, unsigned minor, const char *name)
{
    struct mount_entry e;
    const struct root_query q = {dir, name, major, minor};
    return each_line(text, root_matches, &q, &e);
}
