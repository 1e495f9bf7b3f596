// rill/connectors/kafka_ack.hpp — forwarding name of the internal
// <rill/connectors/detail/kafka_ack.hpp>, for kafka_source.hpp's include only. In the
// installed tree (no detail/ directory) it is empty: no public header needs the ack
// internals. Delete this file once kafka_source.hpp no longer includes it.
#pragma once
#if __has_include("rill/connectors/detail/kafka_ack.hpp")
#include "rill/connectors/detail/kafka_ack.hpp"
#endif
