# Copyright: qonnect.core contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Cluster credentials in the forms AWX and kubernetes.core use (K8S_AUTH_* variables)."""

from __future__ import annotations


class ModuleDocFragment:
    """The cluster credential options of the modules that reach clusters."""

    DOCUMENTATION = r"""
options:
  k8s_kubeconfig:
    description:
      - A kubeconfig, as a file path or as its content (a mapping or YAML text), holding one context per
        cluster named like the cluster (or like the C(context) of its Knowledge Base record).
      - Used for every cluster it has a context for, instead of the kubeconfig path of the cluster's record.
      - If not set, the value of the E(K8S_AUTH_KUBECONFIG) environment variable is used.
      - Never logged. In the module's output the credentials of kubeconfig content (everything under
        C(users), tokens, keys, passwords) are masked; cluster and context names stay readable.
    type: raw
  k8s_host:
    description:
      - API server URL of one cluster, used with O(k8s_api_key), as in C(kubernetes.core) and AWX's
        C(OpenShift or Kubernetes API Bearer Token) credential type.
      - It applies to the cluster named by O(k8s_cluster), or else to the cluster whose Knowledge Base record
        has this URL as its C(server).
      - If not set, the value of the E(K8S_AUTH_HOST) environment variable is used.
    type: str
  k8s_api_key:
    description:
      - Bearer token for O(k8s_host). Never logged or returned.
      - If not set, the value of the E(K8S_AUTH_API_KEY) environment variable is used.
    type: str
  k8s_ca_cert:
    description:
      - Path of the PEM CA bundle that verifies O(k8s_host).
      - If not set, the value of the E(K8S_AUTH_SSL_CA_CERT) environment variable is used.
    type: path
    aliases: [k8s_ssl_ca_cert]
  k8s_validate_certs:
    description:
      - Whether to verify the TLS certificate of O(k8s_host).
      - If not set, the value of the E(K8S_AUTH_VERIFY_SSL) environment variable is used, else V(true).
    type: bool
    aliases: [k8s_verify_ssl]
  k8s_cluster:
    description:
      - Name of the cluster O(k8s_host) and O(k8s_api_key) are for, when its Knowledge Base record has no
        (or another) C(server).
      - If not set, the value of the E(QONNECT_K8S_CLUSTER) environment variable is used.
    type: str
notes:
  - Credentials of a cluster, first match wins - C(kubeconfigs.<cluster>) where the module has that option,
    O(k8s_host) with O(k8s_api_key), a context of O(k8s_kubeconfig), the kubeconfig path of the cluster's
    Knowledge Base record. Reader and agent tokens cannot read those paths.
"""
