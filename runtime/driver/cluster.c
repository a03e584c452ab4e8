/* cluster.c — node addresses, the graph hash and the run key file of a multi-node run
 * (cluster.h). */
#include "runtime/driver/cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int vf_net_resolve(const char *host, const char *what, char ip[VF_ADDR_MAX], vf_status *st)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(host, NULL, &hints, &res);
    if (e != 0 || !res)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s \"%s\": cannot resolve it to an IPv4 address: %s",
                             what, host, gai_strerror(e));
    inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip, VF_ADDR_MAX);
    freeaddrinfo(res);
    return 0;
}

int vf_net_iface_addr(const char *iface, char ip[VF_ADDR_MAX], vf_status *st)
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0)
        return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "getifaddrs: %s", strerror(errno));
    bool found = false;
    for (struct ifaddrs *a = all; a && !found; a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || strcmp(a->ifa_name, iface) != 0) continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, ip, VF_ADDR_MAX);
        found = true;
    }
    freeifaddrs(all);
    if (!found)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "--iface %s: no such interface with an IPv4 address on this host", iface);
    return 0;
}

int vf_net_route_addr(const char *peer_ip, char ip[VF_ADDR_MAX], vf_status *st)
{
    struct sockaddr_in peer, self;
    memset(&peer, 0, sizeof peer);
    peer.sin_family = AF_INET;
    peer.sin_port = htons(9); /* a UDP connect sends nothing: it only picks the route */
    if (inet_pton(AF_INET, peer_ip, &peer.sin_addr) != 1)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__, "%s: not an IPv4 address", peer_ip);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return vf_status_set(st, VF_EEXTERNAL, __FILE__, __LINE__, "socket: %s", strerror(errno));
    socklen_t len = sizeof self;
    int rc = 0;
    if (connect(fd, (struct sockaddr *)&peer, sizeof peer) != 0 || getsockname(fd, (struct sockaddr *)&self, &len) != 0)
        rc = vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                           "no route from this host to the meeting address %s: %s (give --addr or --iface)", peer_ip,
                           strerror(errno));
    else
        inet_ntop(AF_INET, &self.sin_addr, ip, VF_ADDR_MAX);
    close(fd);
    return rc;
}

int vf_graph_hash(const vf_graph *g, char hex[VF_GRAPH_HASH_HEX + 1], vf_status *st)
{
    char *json = vf_graph_to_json(g);
    if (!json) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "out of memory");
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *)json, strlen(json), NULL, 0);
    sodium_bin2hex(hex, VF_GRAPH_HASH_HEX + 1, h, sizeof h);
    free(json);
    return 0;
}

int vf_runkey_write(const char *run_dir, const char *key_hex, vf_status *st)
{
    char path[PATH_MAX], tmp[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/run.key", run_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", tmp, strerror(errno));
    size_t n = strlen(key_hex);
    bool ok = fchmod(fd, 0600) == 0 && write(fd, key_hex, n) == (ssize_t)n && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return vf_status_set(st, VF_EIO, __FILE__, __LINE__, "%s: %s", path, strerror(e));
    }
    return 0;
}

int vf_runkey_read(const char *run_dir, char hex[65], vf_status *st)
{
    char path[PATH_MAX], buf[80];
    snprintf(path, sizeof path, "%s/run.key", run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    struct stat sb;
    ssize_t n = -1;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && !(sb.st_mode & 077) && sb.st_uid == geteuid())
        n = read(fd, buf, sizeof buf - 1);
    else {
        close(fd);
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "%s: a run key must be a file of this user that nobody else can read (mode 0600)", path);
    }
    close(fd);
    if (n < 64) return 0; /* being written */
    memcpy(hex, buf, 64);
    hex[64] = 0;
    return 1;
}
