/* Framed load for bench/proxy_overhead.py: a Kafka-framed echo server and a pipelining client.
 *
 * Written in C so that neither end is the bottleneck when a relay is measured (the machine has
 * 2 cores; a Python load generator would saturate before the relays do).
 *
 *   proxy_overhead_load server PORT
 *       For every request frame (int32 size + payload) answer one 8-byte response frame carrying
 *       the request's correlation id (payload bytes 4..8). Bodies are skipped, never copied.
 *   proxy_overhead_load client HOST PORT CONNECTIONS WINDOW FRAME_BYTES SECONDS
 *       Keep WINDOW requests of FRAME_BYTES in flight on each connection for SECONDS (after a
 *       0.5 s warm-up), then print one JSON line: requests, bytes, seconds, p50/p99 latency (us).
 *       Requests look like Produce v7 (api_key 0, header v1, null client id) so a Kafka proxy
 *       relays them on its opaque fast path.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF (256 * 1024)

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

static void nonblock(int fd) {
    int one = 1;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- frame scanner shared by both ends: size prefix, 8 payload bytes, skip the rest ---- */
typedef struct {
    unsigned char head[12];
    int have;          /* bytes of head collected */
    int64_t skip;      /* payload bytes still to skip */
    int32_t size;
    uint32_t cid;
} scanner;

/* Feed bytes; calls on_frame(ctx, correlation_id) once a frame is complete (a server that
 * answered before the whole request arrived would not be Kafka). */
static void scan(scanner *s, const unsigned char *p, ssize_t n, void (*on_frame)(void *, uint32_t),
                 void *ctx) {
    ssize_t i = 0;
    while (i < n) {
        if (s->skip > 0) {
            ssize_t take = n - i < s->skip ? n - i : s->skip;
            i += take;
            s->skip -= take;
            if (s->skip == 0) {
                s->have = 0;
                on_frame(ctx, s->cid);
            }
            continue;
        }
        s->head[s->have++] = p[i++];
        if (s->have == 4) {
            s->size = (int32_t)ntohl(*(uint32_t *)s->head);
            if (s->size < 8) { fprintf(stderr, "bad frame size %d\n", s->size); exit(2); }
        }
        if (s->have == 12) {
            s->cid = ntohl(*(uint32_t *)(s->head + 8));  /* requests: payload[4..8] */
            if (s->size == 8) s->cid = ntohl(*(uint32_t *)(s->head + 4)); /* responses: payload[0..4] */
            s->skip = s->size - 8;
            if (s->skip == 0) {
                s->have = 0;
                on_frame(ctx, s->cid);
            }
        }
    }
}

/* ---------------------------------- server ---------------------------------- */
typedef struct {
    int fd;
    scanner sc;
    unsigned char *out;
    size_t out_len, out_cap;
} sconn;

static void srv_frame(void *ctx, uint32_t cid) {
    sconn *c = ctx;
    if (c->out_len + 12 > c->out_cap) {
        c->out_cap = c->out_cap ? c->out_cap * 2 : 65536;
        c->out = realloc(c->out, c->out_cap);
    }
    uint32_t size = htonl(8), id = htonl(cid), zero = 0;
    memcpy(c->out + c->out_len, &size, 4);
    memcpy(c->out + c->out_len + 4, &id, 4);
    memcpy(c->out + c->out_len + 8, &zero, 4);
    c->out_len += 12;
}

static int flush_out(sconn *c) {
    size_t off = 0;
    while (off < c->out_len) {
        ssize_t w = send(c->fd, c->out + off, c->out_len - off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN) break;
            return -1;
        }
        off += (size_t)w;
    }
    memmove(c->out, c->out + off, c->out_len - off);
    c->out_len -= off;
    return 0;
}

static int server(int port) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
    listen(lfd, 512);
    nonblock(lfd);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    printf("listening %d\n", port);
    fflush(stdout);
    unsigned char *buf = malloc(BUF);
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(ep, evs, 64, -1);
        for (int k = 0; k < n; k++) {
            sconn *c = evs[k].data.ptr;
            if (c == NULL) {
                int fd;
                while ((fd = accept(lfd, NULL, NULL)) >= 0) {
                    nonblock(fd);
                    sconn *nc = calloc(1, sizeof *nc);
                    nc->fd = fd;
                    struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
                }
                continue;
            }
            int closed = 0;
            for (;;) {
                ssize_t r = recv(c->fd, buf, BUF, 0);
                if (r > 0) { scan(&c->sc, buf, r, srv_frame, c); continue; }
                if (r == 0 || errno != EAGAIN) closed = 1;
                break;
            }
            if (!closed && flush_out(c) < 0) closed = 1;
            if (closed) {
                close(c->fd);
                free(c->out);
                free(c);
            }
        }
    }
    return 0;
}

/* ---------------------------------- client ---------------------------------- */
typedef struct {
    int fd;
    scanner sc;
    uint64_t *sent;  /* send time per slot (cid % window) */
    uint32_t next_cid;
    int window;
    int to_send;     /* requests owed (responses received since the last write) */
    unsigned char *frame;
    size_t frame_len;
    unsigned char *out; /* batched requests not yet written */
    size_t out_len, out_cap;
    size_t partial;  /* bytes of out already written */
} cconn;

static uint32_t *samples;
static size_t n_samples, cap_samples;
static uint64_t measure_from, measure_to, done_requests;
static int frame_bytes;

static void cli_frame(void *ctx, uint32_t cid) {
    cconn *c = ctx;
    uint64_t t = now_ns();
    if (t >= measure_from && t < measure_to) {
        if (n_samples < cap_samples) samples[n_samples++] = (uint32_t)((t - c->sent[cid % c->window]) / 1000);
        done_requests++;
    }
    c->to_send++;
}

static void write_requests(cconn *c) {
    for (;;) {
        if (c->partial == c->out_len) {
            /* Batch every owed request into one buffer: one send() for many small frames. */
            c->partial = c->out_len = 0;
            if (c->to_send == 0) return;
            size_t need = (size_t)c->to_send * c->frame_len;
            if (need > c->out_cap) {
                c->out_cap = need;
                c->out = realloc(c->out, need);
            }
            uint64_t t = now_ns();
            while (c->to_send > 0) {
                uint32_t id = htonl(c->next_cid);
                memcpy(c->frame + 8, &id, 4);
                memcpy(c->out + c->out_len, c->frame, c->frame_len);
                c->out_len += c->frame_len;
                c->sent[c->next_cid % c->window] = t;
                c->next_cid++;
                c->to_send--;
            }
        }
        ssize_t w = send(c->fd, c->out + c->partial, c->out_len - c->partial, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN) return;
            die("send");
        }
        c->partial += (size_t)w;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int client(const char *host, int port, int conns, int window, int fbytes, double seconds) {
    frame_bytes = fbytes;
    cap_samples = 20 * 1000 * 1000;
    samples = malloc(cap_samples * sizeof *samples);
    int ep = epoll_create1(0);
    cconn *cs = calloc(conns, sizeof *cs);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    for (int i = 0; i < conns; i++) {
        cconn *c = &cs[i];
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
        nonblock(c->fd);
        c->window = window;
        c->sent = calloc(window, sizeof *c->sent);
        c->frame_len = 4 + (size_t)fbytes;
        c->frame = calloc(1, c->frame_len);
        uint32_t size = htonl(fbytes);
        memcpy(c->frame, &size, 4);
        c->frame[4] = 0; c->frame[5] = 0;   /* api_key 0 (Produce) */
        c->frame[6] = 0; c->frame[7] = 7;   /* api_version 7: request header v1 */
        c->frame[12] = 0xff; c->frame[13] = 0xff; /* client_id null */
        c->to_send = window;
        struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
    }
    uint64_t start = now_ns();
    measure_from = start + 500000000ull;
    measure_to = measure_from + (uint64_t)(seconds * 1e9);
    unsigned char *buf = malloc(BUF);
    struct epoll_event evs[64];
    for (int i = 0; i < conns; i++) write_requests(&cs[i]);
    while (now_ns() < measure_to) {
        int n = epoll_wait(ep, evs, 64, 100);
        for (int k = 0; k < n; k++) {
            cconn *c = evs[k].data.ptr;
            for (;;) {
                ssize_t r = recv(c->fd, buf, BUF, 0);
                if (r > 0) { scan(&c->sc, buf, r, cli_frame, c); continue; }
                if (r == 0) { fprintf(stderr, "connection closed by peer\n"); exit(1); }
                if (errno != EAGAIN) die("recv");
                break;
            }
            write_requests(c);
        }
    }
    qsort(samples, n_samples, sizeof *samples, cmp_u32);
    uint32_t p50 = n_samples ? samples[n_samples / 2] : 0;
    uint32_t p99 = n_samples ? samples[(size_t)(n_samples * 0.99)] : 0;
    printf("{\"requests\": %llu, \"seconds\": %.3f, \"bytes\": %llu, \"p50_us\": %u, \"p99_us\": %u}\n",
           (unsigned long long)done_requests, seconds,
           (unsigned long long)done_requests * (unsigned long long)(4 + fbytes), p50, p99);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "server") == 0) return server(atoi(argv[2]));
    if (argc == 8 && strcmp(argv[1], "client") == 0)
        return client(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atof(argv[7]));
    fprintf(stderr, "usage: %s server PORT | client HOST PORT CONNECTIONS WINDOW FRAME_BYTES SECONDS\n", argv[0]);
    return 2;
}
