/*
 * The CUDA backend's table: backend.h on the CUDA runtime. runtime.c serves
 * devices, streams, events and graphs, vmm.c growable segments and graph
 * pages, peer.c the devices' access to each other's memory, and guard.c
 * how each call reaches CUDA.
 */
#include "backend.h"
#include "cuda_backend.h"

const cpool__backend cpool__backend_cuda = {
    .kind = CPOOL_BACKEND_CUDA,
    .name = "cuda",
    .device_open = cpool__cuda_device_open,
    .device_close = cpool__cuda_device_close,
    .segment_alloc = cpool__cuda_segment_alloc,
    .segment_free = cpool__cuda_segment_free,
    .va_supported = cpool__cuda_va_supported,
    .call_relaxed = cpool__cuda_call_relaxed,
    .va_reserve = cpool__cuda_va_reserve,
    .va_release = cpool__cuda_va_release,
    .pages_map = cpool__cuda_pages_map,
    .pages_unmap = cpool__cuda_pages_unmap,
    .pages_inside = cpool__cuda_pages_inside,
    .mem_create = cpool__cuda_mem_create,
    .mem_release = cpool__cuda_mem_release,
    .mem_map = cpool__cuda_mem_map,
    .mem_unmap = cpool__cuda_mem_unmap,
    .host_alloc = cpool__cuda_host_alloc,
    .host_free = cpool__cuda_host_free,
    .stream_create = cpool__cuda_stream_create,
    .stream_destroy = cpool__cuda_stream_destroy,
    .stream_native = cpool__cuda_stream_native,
    .stream_synchronize = cpool__cuda_stream_synchronize,
    .launch_host = cpool__cuda_launch_host,
    .memcpy_async = cpool__cuda_memcpy_async,
    .memset_async = cpool__cuda_memset_async,
    .upload_async = cpool__cuda_upload_async,
    .event_create = cpool__cuda_event_create,
    .event_destroy = cpool__cuda_event_destroy,
    .event_record = cpool__cuda_event_record,
    .user_event_record = cpool__cuda_user_event_record,
    .event_done = cpool__cuda_event_done,
    .event_synchronize = cpool__cuda_event_synchronize,
    .event_create_timed = cpool__cuda_event_create_timed,
    .stream_wait_event = cpool__cuda_stream_wait_event,
    .stream_fork = cpool__cuda_stream_fork,
    .event_elapsed_ms = cpool__cuda_event_elapsed_ms,
    .capture_begin = cpool__cuda_capture_begin,
    .capture_end = cpool__cuda_capture_end,
    .graph_instantiate = cpool__cuda_graph_instantiate,
    .capture_status = cpool__cuda_capture_status,
    .graph_launch = cpool__cuda_graph_launch,
    .graph_upload = cpool__cuda_graph_upload,
    .graph_destroy = cpool__cuda_graph_destroy,
    .graph_native = cpool__cuda_graph_native,
    .graph_update_in_place = cpool__cuda_graph_update_in_place,
    .graph_dump_dot = cpool__cuda_graph_dump_dot,
};
