"""NVIDIA Dynamo: trtspec's reference engine as Dynamo workers behind Dynamo's OpenAI frontend (worker.py), the
local deployment `trtspec serve --dynamo N` (launch.py), and the request/metrics mapping they share."""
