/*
 * The host backend's table: backend.h on the CPU, so that everything above
 * works without a GPU. streams.c serves streams and events, capture.c
 * captures and graphs, replay.c runs their work, and memory.c is the
 * device's memory (host_memory.h).
 */
#include "backend.h"
#include "host_backend.h"
#include "host_memory.h"

const cpool__backend cpool__backend_host = {
    .kind = CPOOL_BACKEND_HOST,
    .name = "host",
    .device_open = cpool__host_device_open,
    .device_close = cpool__host_device_close,
    .segment_alloc = cpool__host_segment_alloc,
    .segment_free = cpool__host_segment_free,
    .va_supported = cpool__host_va_supported,
    .call_relaxed = cpool__host_call_relaxed,
    .va_reserve = cpool__host_va_reserve,
    .va_release = cpool__host_va_release,
    .pages_map = cpool__host_pages_map,
    .pages_unmap = cpool__host_pages_unmap,
    .pages_inside = cpool__host_pages_inside,
    .mem_create = cpool__host_mem_create,
    .mem_release = cpool__host_mem_release,
    .mem_map = cpool__host_mem_map,
    .mem_unmap = cpool__host_mem_unmap,
    .host_alloc = cpool__host_copy_alloc,
    .host_free = cpool__host_copy_free,
    .stream_create = cpool__host_stream_create,
    .stream_destroy = cpool__host_stream_destroy,
    .stream_native = cpool__host_stream_native,
    .stream_synchronize = cpool__host_stream_synchronize,
    .launch_host = cpool__host_launch_host,
    .memcpy_async = cpool__host_memcpy_async,
    .memset_async = cpool__host_memset_async,
    .upload_async = cpool__host_upload_async,
    .event_create = cpool__host_event_create,
    .event_destroy = cpool__host_event_destroy,
    .event_record = cpool__host_event_record,
    .user_event_record = cpool__host_user_event_record,
    .event_done = cpool__host_event_done,
    .event_synchronize = cpool__host_event_synchronize,
    .event_create_timed = cpool__host_event_create_timed,
    .stream_wait_event = cpool__host_stream_wait_event,
    .stream_fork = cpool__host_stream_fork,
    .event_elapsed_ms = cpool__host_event_elapsed_ms,
    .capture_begin = cpool__host_capture_begin,
    .capture_end = cpool__host_capture_end,
    .graph_instantiate = cpool__host_graph_instantiate,
    .capture_status = cpool__host_capture_status,
    .graph_launch = cpool__host_graph_launch,
    .graph_upload = cpool__host_graph_upload,
    .graph_destroy = cpool__host_graph_destroy,
    .graph_native = cpool__host_graph_native,
    .graph_update_in_place = cpool__host_graph_update_in_place,
    .graph_dump_dot = cpool__host_graph_dump_dot,
};
