"""HTTP to the upstream and back, below the edge and the recall rounds that both use it:
request intake, the upstream client (with its one reconnect), the relay of the answer
(batched streams) and the usage tap that reads it."""
