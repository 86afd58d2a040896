/* Group scope in C: the proxy's packing of a header-only run (append_run and append_heads, near
 * the end), and the capture writer process's header-only packets: `proxy.capture.snapped`'s Python builder
 * (`whole_frames`, `header_only_blocks` with `_stamped`, `_patch_lanes` and `_patch_each`, and the
 * length `skip_header_only` advances the other leg by), byte for byte, for one run; and
 * `build_runs`, the writer's loop over a batch item's runs (`Synthesizer._header_runs`) in one call.
 *
 * build(template, leg, ts_ns, seq, ack, data, whole, captured) -> (blocks: bytes, advance: int)
 *
 *   template  the 54 bytes of Ethernet/IPv4/TCP header of an empty PSH/ACK packet of the run's
 *             side, seq, ack and TCP checksum zero (`proxy.capture.tcp.Side.snapped`)
 *   leg       the pcapng interface id of the blocks
 *   ts_ns     the run's timestamp (>= 0), nanoseconds
 *   seq, ack  the side's next sequence number and the other side's (any int: taken modulo 2**32)
 *   data      the frames' heads back to back (`captured` bytes each), or, with `whole`, the frames
 *             themselves back to back
 *   captured  the bytes a block keeps of a frame (12 for a request, 8 for a response)
 *
 * Per frame: one Enhanced Packet Block per MAX_SEGMENT bytes of it (size prefix included), the
 * first holding the frame's first `captured` bytes, every block's original length the frame
 * piece's; the IPv4 total length and checksum are the piece's (`Side.header`), the TCP checksum
 * stays 0 ("not computed"). `advance` is what the side's sequence number moves by: 4 + size per
 * frame. Inputs that the proxy never hands over (a negative size, a head cut short, frames that
 * do not end where the data ends) raise ValueError instead of writing anything.
 *
 * The GIL is held throughout (a run is at most a read's frames: microseconds); lengths are
 * Py_ssize_t and every sum is checked before it is used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define EPB_HEAD 28        /* Enhanced Packet Block: type, total, interface, ts high/low, caplen, len */
#define HEADERS_BYTES 54   /* Ethernet (14) + IPv4 (20) + TCP (20), no options */
#define MAX_SEGMENT 65000  /* TCP payload per packet (`proxy.capture.tcp.MAX_SEGMENT`) */
#define IP_AT 14
#define IP_LENGTH_AT 16
#define IP_CHECKSUM_AT 24
#define SEQ_AT 38
#define ACK_AT 42
#define MAX_CAPTURED 64
#define RUN_HEAD 17        /* proxy.layouts.HEADER_RUN, "<Iqi?": conn, ts_ns, signed length, kind */

static inline uint32_t get_be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put_be16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static inline void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* A block's total length when it holds `holds` bytes of payload (padded to 4, trailer). */
static inline Py_ssize_t block_total(Py_ssize_t holds)
{
    Py_ssize_t caplen = HEADERS_BYTES + holds;
    return EPB_HEAD + caplen + ((-caplen) & 3) + 4;
}

/* The frames of a run: where each head is and its size, in order. */
typedef struct {
    const unsigned char *data;
    Py_ssize_t length;
    Py_ssize_t captured;
    int whole;
    Py_ssize_t at;
} Frames;

/* The next frame's head and size; 0 at the end, -1 (ValueError set) on malformed data. */
static int next_frame(Frames *frames, const unsigned char **head, int64_t *size)
{
    Py_ssize_t at = frames->at;
    Py_ssize_t left = frames->length - at;
    if (left == 0) {
        return 0;
    }
    if (left < frames->captured) {
        PyErr_SetString(PyExc_ValueError, "header-only run: a frame's head is cut short");
        return -1;
    }
    int32_t value = (int32_t)get_be32(frames->data + at);
    if (value < 0) {
        PyErr_SetString(PyExc_ValueError, "header-only run: a negative frame size");
        return -1;
    }
    if (frames->whole) {
        if ((int64_t)value + 4 > (int64_t)left) {
            PyErr_SetString(PyExc_ValueError, "header-only run: a whole frame runs past the data");
            return -1;
        }
        frames->at = at + 4 + (Py_ssize_t)value;
    } else {
        frames->at = at + frames->captured;
    }
    *head = frames->data + at;
    *size = value;
    return 1;
}

/* The IPv4 checksum of `template` with total length 40 + piece, as `Side.header` computes it:
 * the constant words (all but the total length and checksum) plus 40 + piece, modulo 0xFFFF. */
static inline uint32_t ip_checksum(uint32_t constant, uint32_t piece)
{
    uint32_t sum = (constant + 40 + piece) % 0xFFFF;
    return 0xFFFF - (sum ? sum : 0xFFFF);
}

/* 1 when a METH_FASTCALL function `name` got `wanted` arguments, else 0 with TypeError set. */
static int takes(const char *name, Py_ssize_t nargs, Py_ssize_t wanted)
{
    if (nargs != wanted) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, wanted, nargs);
        return 0;
    }
    return 1;
}

/* A growing output: a bytes object resized as blocks are appended (`_PyBytes_Resize`). */
typedef struct {
    PyObject *bytes;
    Py_ssize_t size;
} Out;

/* Room for `more` bytes after `out->size`; -1 with an exception set. */
static int out_reserve(Out *out, Py_ssize_t more)
{
    Py_ssize_t have = out->bytes == NULL ? 0 : PyBytes_GET_SIZE(out->bytes);
    if (more <= have - out->size) {
        return 0;
    }
    if (more > PY_SSIZE_T_MAX - out->size) {
        PyErr_SetString(PyExc_OverflowError, "header-only run: too many bytes");
        return -1;
    }
    Py_ssize_t want = out->size + more;
    if (have <= (PY_SSIZE_T_MAX - want) / 2 && want < have + have / 2) {
        want = have + have / 2;  /* amortized: a batch's runs are appended one by one */
    }
    if (out->bytes == NULL) {
        out->bytes = PyBytes_FromStringAndSize(NULL, want);
        return out->bytes == NULL ? -1 : 0;
    }
    return _PyBytes_Resize(&out->bytes, want);
}

/* Appends one run's blocks to `out` (the two passes `build` documents); `*advance` is what the
 * side's sequence number moves by. 0, or -1 with an exception set and `out` as it was. */
static int build_run(Out *out, const unsigned char *template, Py_ssize_t template_length, int leg,
                     long long ts_ns, uint32_t seq, uint32_t ack, const unsigned char *data,
                     Py_ssize_t length, int whole, Py_ssize_t captured, int64_t *advance)
{
    if (template_length != HEADERS_BYTES || leg < 0 || ts_ns < 0 || captured < 4 ||
        captured > MAX_CAPTURED) {
        PyErr_SetString(PyExc_ValueError,
                        "build: template must be 54 bytes, leg and ts_ns >= 0, captured 4..64");
        return -1;
    }
    if (!whole && length % captured) {
        PyErr_SetString(PyExc_ValueError, "header-only run: not a whole number of heads");
        return -1;
    }
    uint32_t constant = 0;
    for (int at = IP_AT; at < IP_AT + 20; at += 2) {
        if (at != IP_LENGTH_AT && at != IP_CHECKSUM_AT) {
            constant += ((uint32_t)template[at] << 8) | template[at + 1];
        }
    }

    /* First pass: check the frames and size the output. */
    const Py_ssize_t first_total = block_total(captured);
    const Py_ssize_t next_total = block_total(0);
    Frames frames = {data, length, captured, whole, 0};
    const unsigned char *head;
    int64_t size;
    Py_ssize_t total = 0;
    int64_t moved = 0;
    int found;
    while ((found = next_frame(&frames, &head, &size)) == 1) {
        int64_t packets = (size + 4 + MAX_SEGMENT - 1) / MAX_SEGMENT; /* size < 2**31: no overflow */
        int64_t bytes = first_total + (packets - 1) * next_total;
        if (bytes > PY_SSIZE_T_MAX - total || size + 4 > INT64_MAX - moved) {
            PyErr_SetString(PyExc_OverflowError, "header-only run: too many bytes");
            return -1;
        }
        total += (Py_ssize_t)bytes;
        moved += size + 4;
    }
    if (found < 0 || out_reserve(out, total) < 0) {
        return -1;
    }

    /* Second pass: the blocks. */
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(out->bytes) + out->size;
    const uint32_t ts_high = (uint32_t)((unsigned long long)ts_ns >> 32);
    const uint32_t ts_low = (uint32_t)((unsigned long long)ts_ns & 0xFFFFFFFFu);
    frames.at = 0;
    Py_ssize_t position = 0;
    while (next_frame(&frames, &head, &size) == 1) {
        int64_t remaining = size + 4;
        Py_ssize_t holds = captured;
        while (remaining > 0) {
            uint32_t piece = (uint32_t)(remaining < MAX_SEGMENT ? remaining : MAX_SEGMENT);
            Py_ssize_t block = block_total(holds);
            Py_ssize_t caplen = HEADERS_BYTES + holds;
            unsigned char *at = start + position;
            /* The block must fit what the first pass sized (it always does: same walk). */
            if (block > total - position) {
                PyErr_SetString(PyExc_SystemError, "header-only run: output overrun");
                return -1;
            }
            put_le32(at, 6);
            put_le32(at + 4, (uint32_t)block);
            put_le32(at + 8, (uint32_t)leg);
            put_le32(at + 12, ts_high);
            put_le32(at + 16, ts_low);
            put_le32(at + 20, (uint32_t)caplen);
            put_le32(at + 24, HEADERS_BYTES + piece);
            unsigned char *packet = at + EPB_HEAD;
            memcpy(packet, template, HEADERS_BYTES);
            put_be16(packet + IP_LENGTH_AT, 40 + piece);
            put_be16(packet + IP_CHECKSUM_AT, ip_checksum(constant, piece));
            put_be32(packet + SEQ_AT, seq);
            put_be32(packet + ACK_AT, ack);
            memcpy(packet + HEADERS_BYTES, head, (size_t)holds);
            memset(packet + caplen, 0, (size_t)(block - 4 - EPB_HEAD - caplen));
            put_le32(at + block - 4, (uint32_t)block);
            position += block;
            seq += piece; /* modulo 2**32 */
            remaining -= piece;
            holds = 0;
        }
    }
    if (position != total) {
        PyErr_SetString(PyExc_SystemError, "header-only run: output underrun");
        return -1;
    }
    out->size += total;
    *advance = moved;
    return 0;
}

/* The bytes of `out`, trimmed to what was written (NULL with an exception set; `out` is taken). */
static PyObject *out_finish(Out *out)
{
    if (out->bytes == NULL) {
        return PyBytes_FromStringAndSize(NULL, 0);
    }
    if (PyBytes_GET_SIZE(out->bytes) != out->size && _PyBytes_Resize(&out->bytes, out->size) < 0) {
        return NULL;
    }
    PyObject *bytes = out->bytes;
    out->bytes = NULL;
    return bytes;
}

static PyObject *build(PyObject *module, PyObject *args)
{
    (void)module;
    const char *template_bytes;
    Py_ssize_t template_length;
    int leg;
    long long ts_ns;
    unsigned long seq_arg, ack_arg;
    Py_buffer view;
    int whole;
    Py_ssize_t captured;
    if (!PyArg_ParseTuple(args, "y#iLkky*pn:build", &template_bytes, &template_length, &leg, &ts_ns,
                          &seq_arg, &ack_arg, &view, &whole, &captured)) {
        return NULL;
    }
    PyObject *result = NULL;
    Out out = {NULL, 0};
    int64_t advance = 0;
    if (build_run(&out, (const unsigned char *)template_bytes, template_length, leg, ts_ns,
                  (uint32_t)seq_arg, (uint32_t)ack_arg, (const unsigned char *)view.buf, view.len,
                  whole, captured, &advance) == 0) {
        PyObject *blocks = out_finish(&out);
        if (blocks != NULL) {
            result = Py_BuildValue("(NL)", blocks, (long long)advance);
        }
    }
    Py_XDECREF(out.bytes);
    PyBuffer_Release(&view);
    return result;
}

/* One run's streams: (client leg's Stream, upstream leg's Stream) -> the C views of what
 * `proxy.capture.snapped.native_run_blocks` reads, and its sequence number updates. */
static PyObject *str_to_server, *str_to_client, *str_snapped, *str_client_seq, *str_server_seq;

/* stream.<name> = value + moved (Python ints: a stream's sequence numbers are not masked). */
static int add_to(PyObject *stream, PyObject *name, PyObject *value, PyObject *moved)
{
    PyObject *next = PyNumber_Add(value, moved);
    int failed = next == NULL || PyObject_SetAttr(stream, name, next) < 0;
    Py_XDECREF(next);
    return failed ? -1 : 0;
}

/* One run of a batch, as `native_run_blocks(client, upstream, to_server, ts_ns, data, whole)`
 * does it. 0, or -1 with an exception set (nothing appended). */
static int batch_run(Out *out, PyObject *pair, int to_server, long long ts_ns,
                     const unsigned char *data, Py_ssize_t length, int whole,
                     Py_ssize_t request_captured, Py_ssize_t response_captured)
{
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "build_runs(): streams must map conn -> (client, upstream)");
        return -1;
    }
    PyObject *client = PyTuple_GET_ITEM(pair, 0), *upstream = PyTuple_GET_ITEM(pair, 1);
    PyObject *seq_name = to_server ? str_client_seq : str_server_seq;
    PyObject *ack_name = to_server ? str_server_seq : str_client_seq;
    PyObject *side = NULL, *template = NULL, *seq = NULL, *ack = NULL, *moved = NULL, *other = NULL;
    int failed = -1;
    int64_t advance = 0;
    side = PyObject_GetAttr(client, to_server ? str_to_server : str_to_client);
    if (side == NULL || (template = PyObject_GetAttr(side, str_snapped)) == NULL ||
        (seq = PyObject_GetAttr(client, seq_name)) == NULL ||
        (ack = PyObject_GetAttr(client, ack_name)) == NULL) {
        goto done;
    }
    if (!PyBytes_Check(template)) {
        PyErr_SetString(PyExc_TypeError, "build_runs(): a side's template must be bytes");
        goto done;
    }
    uint32_t seq32 = (uint32_t)PyLong_AsUnsignedLongMask(seq);
    uint32_t ack32 = (uint32_t)PyLong_AsUnsignedLongMask(ack);
    if (PyErr_Occurred()) {
        goto done;
    }
    Py_ssize_t before = out->size;
    if (build_run(out, (const unsigned char *)PyBytes_AS_STRING(template),
                  PyBytes_GET_SIZE(template), 0, ts_ns, seq32, ack32, data, length, whole,
                  to_server ? request_captured : response_captured, &advance) < 0) {
        goto done;
    }
    moved = PyLong_FromLongLong((long long)advance);
    other = PyObject_GetAttr(upstream, seq_name);
    if (moved == NULL || other == NULL || add_to(client, seq_name, seq, moved) < 0 ||
        add_to(upstream, seq_name, other, moved) < 0) {
        out->size = before;
        goto done;
    }
    failed = 0;
done:
    Py_XDECREF(moved);
    Py_XDECREF(other);
    Py_XDECREF(side);
    Py_XDECREF(template);
    Py_XDECREF(seq);
    Py_XDECREF(ack);
    return failed;
}

/* build_runs(packed, start, streams, request_captured, response_captured)
 *     -> (blocks, position, written, error)
 * The writer's loop over a batch item of packed header-only runs
 * (`proxy.capture.packets.Synthesizer._header_runs` with `native_run_blocks`), from offset
 * `start`, in one call: each run (`HEADER_RUN` + its bytes) is looked up by conn in `streams`
 * (dict: conn -> (client Stream, upstream Stream)), built as `native_run_blocks` builds it and
 * appended to `blocks`, and the streams' sequence numbers advance. It stops at the end of
 * `packed`, at a run whose conn `streams` does not hold yet (`position` is that run's offset:
 * the caller adds its streams and calls again), or at a malformed run (`error` says why, as the
 * ValueError `native_run_blocks` raises; `position` is its offset). `written` counts the runs
 * done as the Python loop counts them (HEADER_RUN's size plus the run's bytes). */
static PyObject *build_runs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("build_runs", nargs, 5)) {
        return NULL;
    }
    if (!PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "build_runs(): streams must be a dict");
        return NULL;
    }
    Py_ssize_t at = PyLong_AsSsize_t(args[1]);
    Py_ssize_t request_captured = PyLong_AsSsize_t(args[3]);
    Py_ssize_t response_captured = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *packed = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    PyObject *result = NULL, *error = NULL;
    Out out = {NULL, 0};
    long long written = 0;
    if (at < 0 || at > end) {
        PyErr_SetString(PyExc_ValueError, "build_runs(): start is outside the batch");
        goto done;
    }
    while (at < end) {
        if (end - at < RUN_HEAD) {
            error = PyUnicode_FromString("header-only run: the batch ends inside a run's header");
            break;
        }
        const unsigned char *run = packed + at;
        uint32_t conn = (uint32_t)run[0] | (uint32_t)run[1] << 8 | (uint32_t)run[2] << 16 |
                        (uint32_t)run[3] << 24;
        uint64_t ts = 0;
        for (int i = 7; i >= 0; i--) {
            ts = ts << 8 | run[4 + i];
        }
        int32_t length = (int32_t)((uint32_t)run[12] | (uint32_t)run[13] << 8 |
                                   (uint32_t)run[14] << 16 | (uint32_t)run[15] << 24);
        int whole = run[16] != 0;
        int to_server = length > 0;
        int64_t bytes = to_server ? (int64_t)length : -(int64_t)length;
        if (bytes > end - at - RUN_HEAD) {
            error = PyUnicode_FromString("header-only run: a run runs past the batch");
            break;
        }
        PyObject *key = PyLong_FromUnsignedLong(conn);
        if (key == NULL) {
            goto done;
        }
        PyObject *pair = PyDict_GetItemWithError(args[2], key); /* borrowed */
        Py_DECREF(key);
        if (pair == NULL) {
            if (PyErr_Occurred()) {
                goto done;
            }
            break; /* a new connection: the caller adds its streams */
        }
        Py_INCREF(pair); /* held while its streams are read and written */
        int built = batch_run(&out, pair, to_server, (long long)ts, run + RUN_HEAD,
                              (Py_ssize_t)bytes, whole, request_captured, response_captured);
        Py_DECREF(pair);
        if (built < 0) {
            if (!PyErr_ExceptionMatches(PyExc_ValueError) &&
                !PyErr_ExceptionMatches(PyExc_OverflowError)) {
                goto done;
            }
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            error = value != NULL ? PyObject_Str(value) : PyUnicode_FromString("header-only run");
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
            if (error == NULL) {
                goto done;
            }
            break;
        }
        at += RUN_HEAD + (Py_ssize_t)bytes;
        written += RUN_HEAD + bytes;
    }
    PyObject *blocks = out_finish(&out);
    if (blocks != NULL) {
        result = Py_BuildValue("(NnLO)", blocks, at, written, error != NULL ? error : Py_None);
    }
done:
    Py_XDECREF(out.bytes);
    Py_XDECREF(error);
    PyBuffer_Release(&view);
    return result;
}

/* The arguments append_run and append_heads share: sink, conn, ts_ns, request, and then `data`,
 * `start` and `end` at `data_at` (after append_run's kind). 0, or -1 with an exception set and
 * no buffer held. */
typedef struct {
    unsigned char head[RUN_HEAD]; /* HEADER_RUN but its length and kind, filled in by the caller */
    int request;
    Py_ssize_t start, end;
    Py_buffer view;
} RunArgs;

static int run_args(const char *name, PyObject *const *args, Py_ssize_t data_at, RunArgs *run)
{
    if (!PyByteArray_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): sink must be a bytearray", name);
        return -1;
    }
    unsigned long conn = PyLong_AsUnsignedLong(args[1]);
    if (conn == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (conn > 0xFFFFFFFFUL) {
        PyErr_Format(PyExc_OverflowError, "%s(): conn does not fit in 32 bits", name);
        return -1;
    }
    /* Not PyLong_AsLongLong: for a nanosecond timestamp (3 digits) it takes CPython 3.11's
     * generic _PyLong_AsByteArray, ~170 instructions a call under callgrind. */
    int overflow;
    long long ts_ns = PyLong_AsLongLongAndOverflow(args[2], &overflow);
    if (ts_ns == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%s(): ts_ns does not fit in 64 bits", name);
        return -1;
    }
    run->request = PyObject_IsTrue(args[3]);
    if (run->request < 0) {
        return -1;
    }
    run->start = PyLong_AsSsize_t(args[data_at + 1]);
    if (run->start == -1 && PyErr_Occurred()) {
        return -1;
    }
    run->end = PyLong_AsSsize_t(args[data_at + 2]);
    if (run->end == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (PyObject_GetBuffer(args[data_at], &run->view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (run->start < 0 || run->end < run->start || run->end > run->view.len) {
        PyBuffer_Release(&run->view);
        PyErr_Format(PyExc_ValueError, "%s(): start and end are not a range of data", name);
        return -1;
    }
    uint32_t conn32 = (uint32_t)conn;
    uint64_t ts = (uint64_t)ts_ns;
    for (int i = 0; i < 4; i++) {
        run->head[i] = (unsigned char)(conn32 >> (8 * i));
    }
    for (int i = 0; i < 8; i++) {
        run->head[4 + i] = (unsigned char)(ts >> (8 * i));
    }
    return 0;
}

/* Room for HEADER_RUN and `length` more bytes at the end of `sink`, the run's head written
 * there; the address after the head, or NULL with an exception set (the buffer released). */
static unsigned char *run_reserve(const char *name, PyObject *sink, RunArgs *run, Py_ssize_t length,
                                  int kind)
{
    Py_ssize_t old = PyByteArray_GET_SIZE(sink);
    if (length > INT32_MAX || old > PY_SSIZE_T_MAX - RUN_HEAD - length) {
        PyBuffer_Release(&run->view);
        PyErr_Format(PyExc_OverflowError, "%s(): the run is too long", name);
        return NULL;
    }
    /* Resizing fails (BufferError) while `data` is a view of `sink` itself: nothing is written. */
    if (PyByteArray_Resize(sink, old + RUN_HEAD + length) < 0) {
        PyBuffer_Release(&run->view);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(sink) + old;
    uint32_t signed_length = run->request ? (uint32_t)length : (uint32_t)(-(int64_t)length);
    memcpy(out, run->head, 12);
    for (int i = 0; i < 4; i++) {
        out[12 + i] = (unsigned char)(signed_length >> (8 * i));
    }
    out[16] = (unsigned char)(kind ? 1 : 0);
    return out + RUN_HEAD;
}

/* append_run(sink, conn, ts_ns, request, kind, data, start, end) -> None: the proxy's side of
 * group scope (`proxy.header_runs.python_append_run`, the reference, byte for byte): appends
 * `proxy.layouts.HEADER_RUN` (little-endian conn u32, ts_ns i64, length i32 (> 0 for requests,
 * < 0 for responses), kind bool) and then data[start:end] to the bytearray `sink`, with one
 * resize and one copy. Per read of group scope this replaced a Struct.pack call, a memoryview
 * slice and two bytearray concatenations (bench/README.md, "rec6"). `data` is any buffer. */
static PyObject *append_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("append_run", nargs, 8)) {
        return NULL;
    }
    RunArgs run;
    int kind = PyObject_IsTrue(args[4]);
    if (kind < 0 || run_args("append_run", args, 5, &run) < 0) {
        return NULL;
    }
    Py_ssize_t length = run.end - run.start;
    unsigned char *out = run_reserve("append_run", args[0], &run, length, kind);
    if (out == NULL) {
        return NULL;
    }
    if (length) {
        memcpy(out, (const char *)run.view.buf + run.start, (size_t)length);
    }
    PyBuffer_Release(&run.view);
    Py_RETURN_NONE;
}

/* append_heads(sink, conn, ts_ns, request, data, start, end) -> None: the heads of the whole
 * frames data[start:end] as one HEADS run, what `append_run(sink, conn, ts_ns, request, HEADS,
 * heads, 0, len(heads))` appends for `heads` = each frame's first 12 bytes (a request:
 * `proxy.layouts.REQUEST_HEADS`) or 8 (a response: `RESPONSE_HEADS`) back to back
 * (`proxy.header_runs.python_append_heads`, the reference, byte for byte). The sessions' scans
 * pack a read's frames with it: the relay then hands the writer 12 or 8 bytes a frame instead of
 * the whole frame, and every copy after it (the batch, the pipe, the writer's read) is that much
 * shorter (bench/README.md, "The writer at SCHED_IDLE"). Frames that do not end where the range
 * ends, or are shorter than their head, raise ValueError with nothing written. */
static PyObject *append_heads(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (!takes("append_heads", nargs, 7)) {
        return NULL;
    }
    RunArgs run;
    if (run_args("append_heads", args, 4, &run) < 0) {
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)run.view.buf;
    Py_ssize_t captured = run.request ? 12 : 8;
    Py_ssize_t frames = 0;
    Py_ssize_t at = run.start;
    while (at < run.end) {
        if (run.end - at < captured) {
            break;
        }
        int64_t size = (int32_t)get_be32(data + at);
        if (size < captured - 4 || size > run.end - at - 4) {
            break;
        }
        at += 4 + (Py_ssize_t)size;
        frames++;
    }
    if (at != run.end) {
        PyBuffer_Release(&run.view);
        PyErr_SetString(PyExc_ValueError, "append_heads(): the range is not whole frames, each "
                                          "at least its head long");
        return NULL;
    }
    unsigned char *out = run_reserve("append_heads", args[0], &run, frames * captured, 0);
    if (out == NULL) {
        return NULL;
    }
    for (at = run.start; at < run.end; out += captured) {
        memcpy(out, data + at, (size_t)captured);
        at += 4 + (Py_ssize_t)(int32_t)get_be32(data + at);
    }
    PyBuffer_Release(&run.view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS,
     "build(template, leg, ts_ns, seq, ack, data, whole, captured) -> (blocks, advance): the pcapng "
     "blocks of a run of header-only frames (proxy.capture.snapped's Python builder, byte for byte)."},
    {"build_runs", (PyCFunction)(void (*)(void))build_runs, METH_FASTCALL,
     "build_runs(packed, start, streams, request_captured, response_captured) -> (blocks, "
     "position, written, error): a batch item's header-only runs, one `build` each, in one call."},
    {"append_run", (PyCFunction)(void (*)(void))append_run, METH_FASTCALL,
     "append_run(sink, conn, ts_ns, request, kind, data, start, end): HEADER_RUN and data[start:end] "
     "onto the bytearray sink (proxy.header_runs.python_append_run, byte for byte)."},
    {"append_heads", (PyCFunction)(void (*)(void))append_heads, METH_FASTCALL,
     "append_heads(sink, conn, ts_ns, request, data, start, end): the heads of the whole frames "
     "data[start:end] as one HEADS run onto sink (proxy.header_runs.python_append_heads)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "proxy.capture._snapped",
    "Group scope's header-only runs in C: the writer's packets (proxy.capture.snapped) and the "
    "proxy's packing of them (proxy.header_runs).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__snapped(void)
{
    if ((str_to_server = PyUnicode_InternFromString("to_server")) == NULL ||
        (str_to_client = PyUnicode_InternFromString("to_client")) == NULL ||
        (str_snapped = PyUnicode_InternFromString("snapped")) == NULL ||
        (str_client_seq = PyUnicode_InternFromString("client_seq")) == NULL ||
        (str_server_seq = PyUnicode_InternFromString("server_seq")) == NULL) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
