package client

// Administration of SCRAM users and ACLs (docs/security.md). Adding a user salts and
// iterates the password here: the broker receives the salted password, never the
// password.

import (
	"context"
	"fmt"

	"github.com/ringlog/ringlog/netio/security/scram"
	"github.com/ringlog/ringlog/netio/wire"
)

// UpsertUser sets user's password for each mechanism named (every SCRAM mechanism when
// none is), with iterations PBKDF2 rounds (0: scram.IterationsDefault).
func (c *Client) UpsertUser(ctx context.Context, user, password string, iterations int, mechanisms ...string) error {
	req, err := UserUpsertions(user, password, iterations, mechanisms...)
	if err != nil {
		return err
	}
	return c.alterUsers(ctx, &wire.AlterUsersRequest{Upsertions: req})
}

// UserUpsertions salts password for each mechanism named (all when none is): the entries
// an AlterUsers request carries.
func UserUpsertions(user, password string, iterations int, mechanisms ...string) ([]wire.UserUpsertion, error) {
	if iterations == 0 {
		iterations = scram.IterationsDefault
	}
	if err := scram.CheckIterations(iterations); err != nil {
		return nil, err
	}
	if len(mechanisms) == 0 {
		for _, m := range scram.Mechanisms {
			mechanisms = append(mechanisms, m.Name)
		}
	}
	var out []wire.UserUpsertion
	for _, name := range mechanisms {
		m := scram.ByName(name)
		if m == nil {
			return nil, fmt.Errorf("mechanism %q: want %s or %s", name, scram.SHA256.Name, scram.SHA512.Name)
		}
		salt := scram.NewSalt()
		out = append(out, wire.UserUpsertion{User: user, Mechanism: m.Name, Iterations: int32(iterations), Salt: salt,
			SaltedPassword: m.SaltPassword(password, salt, iterations)})
	}
	return out, nil
}

// DeleteUser removes user's credential for mechanism, or all of them for "".
func (c *Client) DeleteUser(ctx context.Context, user, mechanism string) error {
	return c.alterUsers(ctx, &wire.AlterUsersRequest{Deletions: []wire.UserDeletion{{User: user, Mechanism: mechanism}}})
}

func (c *Client) alterUsers(ctx context.Context, req *wire.AlterUsersRequest) error {
	var resp wire.AlterUsersResponse
	if err := c.callHome(ctx, req, &resp); err != nil {
		return err
	}
	for _, r := range resp.Results {
		if r.ErrorCode != wire.ErrNone {
			return fmt.Errorf("user %s: %w", r.User, wire.CodeError(r.ErrorCode, r.ErrorMessage))
		}
	}
	return nil
}

// DescribeUsers lists the named users (all for none) with their mechanisms.
func (c *Client) DescribeUsers(ctx context.Context, users ...string) ([]wire.UserDescription, error) {
	req := &wire.DescribeUsersRequest{Users: users}
	var resp wire.DescribeUsersResponse
	if err := c.callHome(ctx, req, &resp); err != nil {
		return nil, err
	}
	return resp.Users, wire.CodeError(resp.ErrorCode, resp.ErrorMessage)
}

// CreateACLs adds ACL bindings.
func (c *Client) CreateACLs(ctx context.Context, acls ...wire.ACLBinding) error {
	var resp wire.CreateAclsResponse
	if err := c.callHome(ctx, &wire.CreateAclsRequest{ACLs: acls}, &resp); err != nil {
		return err
	}
	for _, r := range resp.Results {
		if r.ErrorCode != wire.ErrNone {
			return wire.CodeError(r.ErrorCode, r.ErrorMessage)
		}
	}
	return nil
}

// DescribeACLs lists the bindings matching filter (zero fields match anything).
func (c *Client) DescribeACLs(ctx context.Context, filter wire.ACLBinding) ([]wire.ACLBinding, error) {
	var resp wire.DescribeAclsResponse
	if err := c.callHome(ctx, &wire.DescribeAclsRequest{Filter: filter}, &resp); err != nil {
		return nil, err
	}
	return resp.ACLs, wire.CodeError(resp.ErrorCode, resp.ErrorMessage)
}

// DeleteACLs removes every binding matching one of filters and returns them.
func (c *Client) DeleteACLs(ctx context.Context, filters ...wire.ACLBinding) ([]wire.ACLBinding, error) {
	var resp wire.DeleteAclsResponse
	if err := c.callHome(ctx, &wire.DeleteAclsRequest{Filters: filters}, &resp); err != nil {
		return nil, err
	}
	return resp.Deleted, wire.CodeError(resp.ErrorCode, resp.ErrorMessage)
}
