"""The real-node test bed: a control plane, one real kubelet node and kwok GPU pools in one network
namespace, reached from the host through loopback relays only (docs/real-node.md)."""

from dockyard_localcluster.testbed.bed import TestBed, TestBedError, TestBedSettings

__all__ = ["TestBed", "TestBedError", "TestBedSettings"]
